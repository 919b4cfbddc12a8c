"""testbed.deployment.wait_reporting: how often it reads the cluster's state while it waits.

The benchmark polls sinfo every 0.5 s (as its native half does); reading the cluster's state
(four kubectl calls) on every poll made each round ~2.5 s, so the moment the nodes were idle
was seen late. report_every bounds those reads; without done() the state is what is waited for.
"""

import pytest

from testbed import deployment


@pytest.fixture
def states(monkeypatch):
    """The readiness() answers, one per call: (usable, line); records each call."""
    calls = []
    answers = {"next": iter(())}

    def readiness(kube, namespace, cluster):
        calls.append((namespace, cluster))
        return next(answers["next"], (False, "still starting"))

    monkeypatch.setattr(deployment, "readiness", readiness)

    def given(*answer_list):
        answers["next"] = iter(answer_list)
        return calls
    return given


def done_after(polls: int):
    seen = {"n": 0}

    def done() -> bool:
        seen["n"] += 1
        return seen["n"] >= polls
    return done, seen


def test_report_every_bounds_the_state_reads_between_polls(states):
    calls = states()
    done, seen = done_after(6)
    reports = []
    deployment.wait_reporting(None, "ns", "c", 30, "idle", report=reports.append, done=done,
                              interval=0.01, report_every=60)
    assert seen["n"] == 6
    assert calls == []  # all six polls came within the first 60 s: nothing read, nothing loaded
    assert reports == []


def test_with_report_every_the_state_is_read_once_per_period_the_first_after_one(states, monkeypatch):
    clock = {"now": 1000.0}
    monkeypatch.setattr(deployment.time, "monotonic", lambda: clock["now"])
    calls = states((False, "a"), (False, "b"))
    polls = {"n": 0}

    def done() -> bool:  # each poll is 4 s after the one before
        polls["n"] += 1
        clock["now"] += 4
        return polls["n"] >= 7
    reports = []
    deployment.wait_reporting(None, "ns", "c", 300, "idle", report=reports.append, done=done,
                              interval=0.001, report_every=10)
    # polls at +0, +4, +8, +12 (read: 10 s or more after the start), +16, +20, +24 (read: 12 s after it)
    assert len(calls) == 2 and [r.split("] ", 1)[1] for r in reports] == ["a", "b"]


def test_without_report_every_each_poll_reads_the_state_and_reports_changes(states):
    calls = states((False, "a"), (False, "a"), (False, "b"))
    done, seen = done_after(3)
    reports = []
    deployment.wait_reporting(None, "ns", "c", 30, "idle", report=reports.append, done=done, interval=0.01)
    assert len(calls) == 3 and seen["n"] == 3
    assert [r.split("] ", 1)[1] for r in reports] == ["a", "b"]  # a change is reported once


def test_without_done_the_state_is_what_is_waited_for_and_report_every_does_not_skip_it(states):
    calls = states((False, "x"), (False, "x"), (True, "usable"))
    deployment.wait_reporting(None, "ns", "c", 30, "usable", report=lambda line: None, interval=0.01,
                              report_every=60)
    assert len(calls) == 3


def test_a_wait_that_does_not_end_names_the_last_state(states):
    states()
    with pytest.raises(deployment.DeploymentError, match="still starting"):
        deployment.wait_reporting(None, "ns", "c", 0.2, "idle", report=lambda line: None,
                                  done=lambda: False, interval=0.05, report_every=60)


def test_a_wait_that_gives_up_before_any_read_still_says_what_it_waited_for(monkeypatch):
    """The deferred first read happens at the give-up; if the API cannot answer then, the error is
    still the wait's, naming what was waited for and why the state is missing."""
    from testbed.kubectl import KubectlError

    def readiness(kube, namespace, cluster):
        raise KubectlError("kubectl get slurmcluster c exited 1: connection refused")

    monkeypatch.setattr(deployment, "readiness", readiness)
    with pytest.raises(deployment.DeploymentError, match="idle(.|\n)*could not be read.*connection refused"):
        deployment.wait_reporting(None, "ns", "c", 0.2, "idle", report=lambda line: None,
                                  done=lambda: False, interval=0.05, report_every=60)
