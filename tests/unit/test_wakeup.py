"""A burst of watch events settles before the reconcile it wakes (reconcile/wakeup.py)."""

from __future__ import annotations

import threading
import time

import pytest

from kubeslurm.reconcile import wakeup as wakeup_module
from kubeslurm.reconcile.wakeup import (MAX_SETTLE_SECONDS, MAX_SETTLE_WHILE_PODS_GO_SECONDS, SETTLE_SECONDS,
                                        STORM_EVENTS, Wakeup, settle_wait)


@pytest.mark.parametrize("now,due_at,last_event_at,burst_events,expected", [
    (100.0, 100.0, None, 0, 0.0),  # due by its time (resync, again soon), no event ever: at once
    (100.0, 100.0, 50.0, 5, 0.0),  # the last event long ago: at once
    (100.0, 100.0, 100.0, 1, 0.0),  # the first event after a quiet spell (kubectl scale): at once
    (100.0, 100.0, 100.0, STORM_EVENTS - 1, 0.0),  # a burst too small to wait for (a new cluster's)
    (100.0, 100.0, 100.0, STORM_EVENTS, SETTLE_SECONDS),  # a storm, its last event just now: wait for quiet
    (100.1, 100.0, 100.0, STORM_EVENTS, SETTLE_SECONDS - 0.1),
    (100.0, 100.0, 99.9, 400, SETTLE_SECONDS - 0.1),  # quiet for 0.1 s already
    # a storm: every event pushes the quiet further, but never past MAX_SETTLE_SECONDS after due
    (100.0 + MAX_SETTLE_SECONDS - 0.05, 100.0, 100.0 + MAX_SETTLE_SECONDS - 0.05, 900, 0.05),
    (100.0 + MAX_SETTLE_SECONDS, 100.0, 100.0 + MAX_SETTLE_SECONDS, 900, 0.0),
    (200.0, 100.0, 199.99, 3000, 0.0),
])
def test_settle_wait(now, due_at, last_event_at, burst_events, expected):
    assert settle_wait(now, due_at, last_event_at, burst_events) == pytest.approx(expected)


@pytest.mark.parametrize("now,last_event_at,burst_events,expected", [
    # the storm of pods a scale-down removes: the same quiet ends it, but it may last longer
    (100.0 + MAX_SETTLE_SECONDS, 100.0 + MAX_SETTLE_SECONDS, 900, SETTLE_SECONDS),
    (100.0 + MAX_SETTLE_WHILE_PODS_GO_SECONDS - 0.05, 100.0 + MAX_SETTLE_WHILE_PODS_GO_SECONDS - 0.05, 900, 0.05),
    (100.0 + MAX_SETTLE_WHILE_PODS_GO_SECONDS, 100.0 + MAX_SETTLE_WHILE_PODS_GO_SECONDS, 900, 0.0),
    (100.0, 99.9, 400, SETTLE_SECONDS - 0.1),
    (100.0, 100.0, STORM_EVENTS - 1, 0.0),  # no storm: nothing to wait for, pods going or not
])
def test_settle_wait_while_removed_pods_go(now, last_event_at, burst_events, expected):
    assert settle_wait(now, 100.0, last_event_at, burst_events, pods_going=True) == pytest.approx(expected)


def test_a_storm_settles_longer_only_while_awaited_pods_are_still_there(monkeypatch):
    """settle() reads what the flag awaits at each look: the bound is the longer one while a pod
    the last run removed is there, the usual one once none is awaited."""
    seen = []
    monkeypatch.setattr(wakeup_module, "settle_wait",
                        lambda *args, pods_going=False: seen.append(pods_going) or 0.0)
    wakeup = Wakeup()
    wakeup.await_pods_gone(["cpu-1"], lambda name: True)
    wakeup.settle(stopped=False)
    wakeup.await_pods_gone([], lambda name: True)
    wakeup.settle(stopped=False)
    assert seen == [True, False]


def test_a_burst_is_events_less_than_the_settle_time_apart(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(wakeup_module.time, "monotonic", lambda: now[0])
    wakeup = Wakeup()
    counts = []
    for at in (100.0, 100.1, 100.2, 100.2 + SETTLE_SECONDS + 0.01, 100.5 + SETTLE_SECONDS):
        now[0] = at
        wakeup.set()
        counts.append(wakeup.burst_events)
    assert counts == [1, 2, 3, 1, 2] and wakeup.last_set == 100.5 + SETTLE_SECONDS


def test_a_flag_remembers_when_it_was_set():
    wakeup = Wakeup()
    assert wakeup.last_set is None and wakeup.burst_events == 0 and not wakeup.is_set()
    before = time.monotonic()
    wakeup.set()
    assert wakeup.is_set() and wakeup.wait(0) and before <= wakeup.last_set <= time.monotonic()
    wakeup.clear()
    assert not wakeup.is_set() and not wakeup.wait(0.01)


def test_settle_waits_out_a_storm_of_events_up_to_its_bound():
    """A storm (events every 10 ms from another thread, for longer than the bound): settle
    returns after MAX_SETTLE_SECONDS, not when the stream ends, and not at once."""
    wakeup, streaming = Wakeup(), threading.Event()
    for _ in range(STORM_EVENTS):  # the storm's beginning
        wakeup.set()

    def stream():
        end = time.monotonic() + MAX_SETTLE_SECONDS + 1.5
        while time.monotonic() < end:
            wakeup.set()
            streaming.set()
            time.sleep(0.01)

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        streaming.wait(5)
        start = time.monotonic()
        wakeup.settle(stopped=False)
        took = time.monotonic() - start
    finally:
        thread.join()
    assert MAX_SETTLE_SECONDS - 0.05 <= took < MAX_SETTLE_SECONDS + 0.5


def test_a_small_burst_goes_at_once_a_storm_waits_for_quiet_and_a_stop_waits_for_nothing():
    wakeup = Wakeup()
    for _ in range(STORM_EVENTS - 1):
        wakeup.set()
    start = time.monotonic()
    wakeup.settle(stopped=False)
    assert time.monotonic() - start < 0.05
    wakeup.set()  # a storm now
    start = time.monotonic()
    wakeup.settle(stopped=False)
    assert SETTLE_SECONDS - 0.05 <= time.monotonic() - start < SETTLE_SECONDS + 0.3
    wakeup.set()
    start = time.monotonic()
    wakeup.settle(stopped=True)  # the daemon is stopping: no wait
    assert time.monotonic() - start < 0.05


def test_the_last_awaited_pod_gone_makes_the_wakeup_urgent():
    """A run waits for the pods its scale-down removes: each one's going wakes as any event,
    the last one's urgently (no rest, no settling); clear() ends the urgency."""
    wakeup, there = Wakeup(), {"cpu-1", "cpu-2"}
    wakeup.await_pods_gone(["cpu-1", "cpu-2"], there.__contains__)
    assert not wakeup.urgent and not wakeup.is_set()
    wakeup.pod_gone("cpu-1")
    assert not wakeup.urgent and not wakeup.is_set()
    wakeup.pod_gone("other-0")  # not one awaited
    assert not wakeup.urgent
    wakeup.pod_gone("cpu-2")
    assert wakeup.urgent and wakeup.is_set()
    wakeup.clear()
    assert not wakeup.urgent and not wakeup.is_set()
    wakeup.pod_gone("cpu-2")  # seen again (a relist): nothing awaited any more
    assert not wakeup.urgent


@pytest.mark.parametrize("names,there,urgent", [
    ([], set(), False),  # nothing removed: nothing to wait for
    (["cpu-1"], set(), True),  # gone already, between the run's read and now
    (["cpu-1", "cpu-2"], {"cpu-2"}, False),
])
def test_pods_gone_before_the_run_ended_count_as_gone(names, there, urgent):
    wakeup = Wakeup()
    wakeup.await_pods_gone(names, there.__contains__)
    assert wakeup.urgent is urgent and wakeup.is_set() is urgent


def test_a_later_run_replaces_what_the_earlier_waited_for():
    wakeup = Wakeup()
    wakeup.await_pods_gone(["cpu-1", "cpu-2"], lambda name: True)
    wakeup.await_pods_gone(["cpu-2"], lambda name: True)
    wakeup.pod_gone("cpu-2")
    assert wakeup.urgent
    wakeup.clear()
    wakeup.await_pods_gone([], lambda name: True)
    wakeup.pod_gone("cpu-1")
    assert not wakeup.urgent


def test_an_urgent_wakeup_does_not_settle_in_a_storm():
    wakeup = Wakeup()
    for _ in range(STORM_EVENTS):
        wakeup.set()
    wakeup.await_pods_gone(["cpu-0"], lambda name: False)
    start = time.monotonic()
    wakeup.settle(stopped=False)
    assert time.monotonic() - start < 0.05
