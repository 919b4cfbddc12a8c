"""The per-cluster reconcile loop (reconcile/handlers.py): what it keeps between reconciles."""

import gc
import threading
import weakref

import pytest

from kubeslurm.reconcile import handlers, wakeup
from kubeslurm.reconcile.run_state import Run


class OneReconcile:
    def __init__(self, stopped: threading.Event):
        self.stopped, self.runs = stopped, []

    def reconcile(self, namespace, name):
        run = Run(raw={"metadata": {"name": name, "namespace": namespace}})
        run.slurmd_pods = [{"metadata": {"name": f"cpu-{i}"}} for i in range(1000)]  # a big listing
        self.runs.append(weakref.ref(run))
        return run


def test_the_run_and_its_listings_are_let_go_before_free_memory_is_returned(monkeypatch):
    """Between reconciles the loop holds no Run: its listings are garbage before
    return_free_memory() trims the heap, so a resync interval is not spent holding them."""
    stopped = threading.Event()
    reconciler = OneReconcile(stopped)
    alive_at_trim = []

    def trim():
        gc.collect()
        alive_at_trim.append([ref() is not None for ref in reconciler.runs])
        stopped.set()  # one reconcile is enough

    class Stopped:
        def __bool__(self):
            return stopped.is_set()

    monkeypatch.setattr(handlers.RUNTIME, "reconciler", reconciler)
    monkeypatch.setattr(handlers, "return_free_memory", trim)
    handlers._reconcile_until_stopped("hpc", "research", Stopped())
    assert alive_at_trim == [[False]]


class Clock:
    """time.monotonic and time.sleep of the loop and its wake-up flags: sleeping moves the clock,
    nothing waits. `events_every`: a watch event wakes the cluster that often meanwhile (a storm)."""

    def __init__(self, events_every: float | None = None, cluster: tuple[str, str] = ("hpc", "burst")):
        self.now = 1000.0
        self.events_every, self.cluster = events_every, cluster

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        if self.events_every is None:
            self.now += seconds
            return
        end = self.now + seconds
        while self.now < end:
            self.now = min(end, self.now + self.events_every)
            handlers.RUNTIME.nudge(*self.cluster)


class BusyReconciles:
    """Each reconcile takes `took` seconds of the clock, and a watch event comes during each
    (the wake-up flag is set again): a burst of pod events that never ends."""

    def __init__(self, clock: Clock, took: float, stopped: threading.Event, count: int):
        self.clock, self.took, self.stopped, self.count, self.starts = clock, took, stopped, count, []

    def reconcile(self, namespace, name):
        self.starts.append(self.clock.now)
        self.clock.now += self.took
        handlers.RUNTIME.nudge(namespace, name)
        if len(self.starts) == self.count:
            self.stopped.set()
        return Run(raw={"metadata": {"name": name, "namespace": namespace}})


def reconcile_starts(monkeypatch, clock: Clock, took: float) -> list[float]:
    """When four reconciles of `took` seconds started, each woken by an event during the last."""
    stopped = threading.Event()
    reconciler = BusyReconciles(clock, took, stopped, count=4)

    class Stopped:
        def __bool__(self):
            return stopped.is_set()

    monkeypatch.setattr(handlers, "RUNTIME", handlers.Runtime())
    monkeypatch.setattr(handlers, "time", clock)
    monkeypatch.setattr(wakeup, "time", clock)
    monkeypatch.setattr(handlers.RUNTIME, "reconciler", reconciler)
    monkeypatch.setattr(handlers, "return_free_memory", lambda: None)
    handlers._reconcile_until_stopped(*clock.cluster, Stopped())
    return [later - earlier for earlier, later in zip(reconciler.starts, reconciler.starts[1:])]


@pytest.mark.parametrize("took,gap", [
    (0.05, 0.1),  # a small cluster: the next reconcile 50 ms after the last ended
    (2.0, 4.0),  # 1000 pods on a slow machine: half the time reconciling, half resting
    (8.0, 8.0 + handlers.MAX_REST_SECONDS),  # the rest is bounded
])
def test_a_burst_of_events_waits_as_long_as_the_last_reconcile_took(monkeypatch, took, gap):
    """An event in each reconcile, never a storm (wakeup.py): no wait for them to settle."""
    assert reconcile_starts(monkeypatch, Clock(), took) == pytest.approx([gap] * 3)


@pytest.mark.parametrize("took", [0.05, 0.5, 2.0])
def test_a_storm_of_events_is_read_every_few_seconds_not_at_each(monkeypatch, took):
    """Events every 0.1 ms that never stop (1000 pods deleted bring thousands): after its rest,
    each reconcile waits MAX_SETTLE_SECONDS more for a quiet that does not come, then reads the storm."""
    gaps = reconcile_starts(monkeypatch, Clock(events_every=0.0001), took)
    assert gaps == pytest.approx([took + handlers.rest_after(took) + wakeup.MAX_SETTLE_SECONDS] * 3)


@pytest.mark.parametrize("took,rest", [(0.0, 0.0), (-1.0, 0.0), (0.2, 0.2), (3.0, 3.0), (60.0, handlers.MAX_REST_SECONDS)])
def test_rest_after(took, rest):
    assert handlers.rest_after(took) == rest
