"""The job ledger's reading of sacct: completed, requeued, lost, and jobs nobody submitted."""

from __future__ import annotations

import re

import pytest

from testbed.job_ledger import (JobLedger, JobStream, jobs_named, outcomes_of, parse_runs, submitted_before, summarize,
                                unsettled)
from testbed.waiting import WaitTimeout, wait_for

SACCT = """\
101|COMPLETED
102|REQUEUED
102|COMPLETED
103|NODE_FAIL
103|PENDING
104|CANCELLED by 1000
105_0|COMPLETED
105_1|REQUEUED
105_1|COMPLETED
106_0|COMPLETED
106_1|FAILED
999|COMPLETED
"""


def test_each_run_in_order_and_the_first_word_of_a_state():
    runs = parse_runs(SACCT)
    assert runs["102"] == ["REQUEUED", "COMPLETED"]
    assert runs["104"] == ["CANCELLED"]
    assert runs["105_1"] == ["REQUEUED", "COMPLETED"]


@pytest.mark.parametrize("submitted, completed, requeued, lost", [
    (["101"], 1, 0, []),
    (["102"], 1, 1, []),                 # requeued, then completed: not lost
    (["103"], 0, 1, ["103"]),            # requeued and not run again yet
    (["104"], 0, 0, ["104"]),
    (["105"], 1, 1, []),                 # an array whose task was requeued, all completed
    (["106"], 0, 0, ["106"]),            # an array with a failed task
    (["107"], 0, 0, ["107"]),            # never reached sacct
])
def test_summary_per_job(submitted, completed, requeued, lost):
    summary = summarize(submitted, {k: v for k, v in parse_runs(SACCT).items() if k.split("_")[0] in submitted})
    assert (summary.completed, summary.requeued, summary.lost) == (completed, requeued, lost)


def test_jobs_in_sacct_that_nobody_submitted_are_named():
    summary = summarize(["101", "102", "103", "104", "105", "106"], parse_runs(SACCT))
    assert summary.unexpected == ["999"]
    assert summary.line("story") == (
        "ledger of story: submitted 6, completed 3, requeued 3, lost 3 (103, 104, 106); "
        "in sacct but never submitted: 999")


WITH_SUBMIT = """\
37|NODE_FAIL|2026-12-03T17:38:01
37|COMPLETED|2026-12-03T17:39:10
41|REQUEUED|2026-12-03T17:41:00
41|COMPLETED|2026-12-03T17:42:05
44_0|COMPLETED|2026-12-03T17:41:30
44_1|COMPLETED|2026-12-03T17:41:30
"""


def test_jobs_first_submitted_before_the_ledger_started_are_an_earlier_ledger_s():
    # 37 was submitted by the test before (sacct lists it in this window); 41 was requeued in
    # this one, which sets its Submit anew, but its first run counts.
    assert submitted_before(WITH_SUBMIT, "2026-12-03T17:40:00") == {"37"}
    assert submitted_before(WITH_SUBMIT, "2026-12-03T17:41:10") == {"37", "41"}
    assert parse_runs(WITH_SUBMIT)["41"] == ["REQUEUED", "COMPLETED"]
    ledger = JobLedger(sh=lambda script: WITH_SUBMIT)
    ledger.started = "2026-12-03T17:40:00"
    ledger.record("41")
    ledger.record("44")
    summary = ledger.summary()
    assert (summary.submitted, summary.completed, summary.requeued, summary.unexpected) == (2, 2, 1, [])
    ledger.started = "2026-12-03T17:30:00"  # 37 submitted after the ledger started: nobody's
    assert ledger.summary().unexpected == ["37"]


def test_a_job_not_bound_to_complete_is_neither_lost_nor_unexpected():
    summary = summarize(["101"], parse_runs(SACCT), others=["103", "104", "105", "106", "102", "999"])
    assert (summary.submitted, summary.lost, summary.unexpected) == (1, [], [])


def test_record_takes_only_job_ids():
    ledger = JobLedger(sh=lambda script: "")
    assert ledger.record(" 42\n") == "42"
    assert ledger.sbatch("--wrap true", run_as=lambda script, user: "43;cluster\n") == "43"
    with pytest.raises(ValueError):
        ledger.record("sbatch: error: Batch job submission failed")
    assert ledger.submitted == ["42", "43"]


NAMED = """\
50|COMPLETED|2026-12-03T18:00:01|ledger-stream-7-0
51|COMPLETED|2026-12-03T18:00:07|ledger-stream-7-1
52|FAILED|2026-12-03T18:00:13|ledger-stream-7-2
53|COMPLETED|2026-12-03T18:00:19|somebody-else
"""


def test_a_submission_whose_answer_was_lost_is_found_by_its_name_and_must_complete():
    assert jobs_named(NAMED, {"ledger-stream-7-1", "ledger-stream-7-2", "ledger-stream-7-9"}) == {"51", "52"}
    ledger = JobLedger(sh=lambda script: NAMED)
    ledger.started = "2026-12-03T18:00:00"
    ledger.record("50")
    assert ledger.summary().unexpected == ["51", "52", "53"]
    # sbatch of -1 and -2 gave no job id (slurmctld restarting), yet made jobs: -2's failed
    ledger.unanswered("ledger-stream-7-1")
    ledger.unanswered("ledger-stream-7-2")
    ledger.unanswered("ledger-stream-7-9")  # this one made no job: nothing to find
    summary = ledger.summary()
    assert (summary.submitted, summary.completed, summary.lost, summary.unexpected) == (3, 2, ["52"], ["53"])
    assert ledger.submitted == ["50", "51", "52"]


def test_a_stream_names_each_submission_and_remembers_those_without_an_answer():
    ledger = JobLedger(sh=lambda script: "")
    submitted: list[str] = []

    def submit(args: str) -> str:
        submitted.append(args)
        if len(submitted) == 2:
            raise RuntimeError("sbatch: error: Socket timed out on send/recv operation")
        return ledger.record(str(len(submitted)))

    with JobStream(ledger, "--wrap true", every=0.01, submit=submit) as stream:
        wait_for(lambda: len(submitted) >= 3, 10, "three submissions")
    names = [re.search(r"--job-name=(\S+)", args).group(1) for args in submitted]
    assert len(set(names)) == len(names) and all(n.startswith(stream.name + "-") for n in names)
    assert stream.refused == 1 and ledger.unanswered_names == {names[1]}


def test_a_requeued_job_still_in_the_queue_is_not_settled_though_its_last_sacct_run_failed():
    """Slurm's requeue delay: the new run has no sacct row until its BeginTime, so sacct alone
    reads NODE_FAIL as the job's last run (a CI run counted such a job as lost)."""
    outcomes = outcomes_of(["7", "8", "9"], parse_runs("7|NODE_FAIL\n8|COMPLETED\n9|RUNNING\n"))
    assert unsettled(outcomes, queued={"7", "9"}) == {"7": "NODE_FAIL, still queued", "9": "RUNNING, still queued"}
    assert unsettled(outcomes, queued=set()) == {"9": "RUNNING"}

    sacct = ["7|NODE_FAIL|2026-12-03T18:00:01|a\n"]
    queue = ["7\n"]

    def sh(script: str) -> str:
        if script.startswith("squeue"):
            return queue[0]
        return sacct[0]

    ledger = JobLedger(sh=sh)
    ledger.started = "2026-12-03T18:00:00"
    ledger.record("7")
    with pytest.raises(WaitTimeout, match="7: NODE_FAIL, still queued"):
        ledger.settle(0.3, interval=0.1)
    sacct[0] += "7|COMPLETED|2026-12-03T18:02:01|a\n"
    queue[0] = ""
    summary = ledger.settle(5, interval=0.1)
    assert (summary.completed, summary.requeued, summary.lost) == (1, 1, [])
