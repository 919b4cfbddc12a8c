"""The per-cluster reconcile loop (reconcile/handlers.py): what it keeps between reconciles, how long it rests."""

import gc
import threading
import weakref
from types import SimpleNamespace

import pytest

from kubeslurm import ownership
from kubeslurm.reconcile import handlers, wakeup
from kubeslurm.reconcile.pod_cache import PodCache
from kubeslurm.reconcile.run_state import NodeSetState, Run
from kubeslurm.reconcile.scale_down import ScalePlan


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
    loop_on_clock(monkeypatch, clock, reconciler, stopped)
    return [later - earlier for earlier, later in zip(reconciler.starts, reconciler.starts[1:])]


def loop_on_clock(monkeypatch, clock: Clock, reconciler, stopped: threading.Event, owned_pods=None) -> None:
    """One cluster's loop (clock.cluster) on `clock`, with `reconciler`, until `stopped` is set;
    `owned_pods`: the pod watch's cache (None: no pod watch)."""

    class Stopped:
        def __bool__(self):
            return stopped.is_set()

    monkeypatch.setattr(handlers, "RUNTIME", handlers.Runtime())
    monkeypatch.setattr(handlers, "time", clock)
    monkeypatch.setattr(wakeup, "time", clock)
    monkeypatch.setattr(handlers.RUNTIME, "reconciler", reconciler)
    monkeypatch.setattr(handlers.RUNTIME, "owned_pods", owned_pods)
    monkeypatch.setattr(handlers, "return_free_memory", lambda: None)
    handlers._reconcile_until_stopped(*clock.cluster, Stopped())


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


class ScaleDownInAStorm(BusyReconciles):
    """BusyReconciles whose runs each lower NodeSet cpu to 0 while its pod cpu-0 is still there."""

    def reconcile(self, namespace, name):
        run = super().reconcile(namespace, name)
        state = NodeSetState(raw={}, model=SimpleNamespace(metadata=SimpleNamespace(name="cpu")),
                             plan=ScalePlan(wanted=0, replicas=0))
        return Run(raw=run.raw, node_sets=[state], slurmd_pods=[POD])


@pytest.mark.parametrize("took", [0.5, 2.0])
def test_a_storm_while_the_removed_pods_go_is_read_less_often(monkeypatch, took):
    """The same endless storm while the pod a scale-down removes has not gone: each reconcile
    waits MAX_SETTLE_WHILE_PODS_GO_SECONDS for the quiet, not MAX_SETTLE_SECONDS (wakeup.py)."""
    clock, stopped = Clock(events_every=0.0001), threading.Event()
    reconciler = ScaleDownInAStorm(clock, took, stopped, count=3)
    cache = PodCache()
    cache.replace(None, [POD])
    loop_on_clock(monkeypatch, clock, reconciler, stopped, owned_pods=cache)
    gaps = [later - earlier for earlier, later in zip(reconciler.starts, reconciler.starts[1:])]
    assert gaps == pytest.approx([took + handlers.rest_after(took) + wakeup.MAX_SETTLE_WHILE_PODS_GO_SECONDS] * 2)


@pytest.mark.parametrize("took,rest", [(0.0, 0.0), (-1.0, 0.0), (0.2, 0.2), (3.0, 3.0), (60.0, handlers.MAX_REST_SECONDS)])
def test_rest_after(took, rest):
    assert handlers.rest_after(took) == rest


class ScaleDownReconciles:
    """A reconcile that lowers a NodeSet to 0 while pod cpu-0 is still there (it waits for it to
    go), then, once it went, the one that finishes; each takes `took` seconds of the clock."""

    def __init__(self, clock: Clock, took: float, stopped: threading.Event):
        self.clock, self.took, self.stopped, self.starts = clock, took, stopped, []

    def reconcile(self, namespace, name):
        self.starts.append(self.clock.now)
        self.clock.now += self.took
        handlers.RUNTIME.nudge(namespace, name)  # an event during it: the burst goes on
        if len(self.starts) == 2:
            self.stopped.set()
        state = NodeSetState(raw={}, model=SimpleNamespace(metadata=SimpleNamespace(name="cpu")),
                             plan=ScalePlan(wanted=0, replicas=0))
        return Run(raw={"metadata": {"name": name, "namespace": namespace}}, node_sets=[state],
                   slurmd_pods=[POD] if len(self.starts) == 1 else [])


POD = {"metadata": {"namespace": "hpc", "name": "cpu-0", "uid": "u0",
                    "labels": {ownership.CLUSTER: "burst", ownership.NODE_SET: "cpu"}}}


def test_the_last_pod_a_scale_down_removes_going_starts_the_next_reconcile_at_once(monkeypatch):
    """The pod watch reports cpu-0 gone 0.3 s after the first reconcile (of 2 s) ended: the next
    starts then, not after the 2 s rest (wakeup.py)."""
    clock, stopped = Clock(), threading.Event()
    reconciler = ScaleDownReconciles(clock, 2.0, stopped)
    cache = PodCache()
    cache.replace(None, [POD])
    deleted_at = []

    def sleep(seconds):
        clock.now += seconds
        if not deleted_at and clock.now >= reconciler.starts[0] + 2.0 + 0.3:
            deleted_at.append(clock.now)
            cache.changed("DELETED", POD)  # the watch forgets it, then hands the event over
            handlers.owned_pod_changed("DELETED", POD)

    clock.sleep = sleep
    loop_on_clock(monkeypatch, clock, reconciler, stopped, owned_pods=cache)
    assert deleted_at and reconciler.starts[1] - reconciler.starts[0] == pytest.approx(2.3, abs=handlers.URGENT_POLL_SECONDS)


def test_the_pods_a_run_awaits_are_those_its_plans_remove():
    def state(name, replicas):
        return NodeSetState(raw={}, model=SimpleNamespace(metadata=SimpleNamespace(name=name)),
                            plan=ScalePlan(wanted=replicas, replicas=replicas))

    pods = [{"metadata": {"name": n, "labels": {ownership.NODE_SET: node_set} if node_set else {}}}
            for n, node_set in (("cpu-0", "cpu"), ("cpu-1", "cpu"), ("cpu-2", "cpu"), ("cpu-x-0", "cpu-x"),
                                ("cpu-x-1", "cpu-x"), ("gpu-3", "gpu"), ("other", None))]
    run = Run(raw={}, node_sets=[state("cpu", 1), state("cpu-x", 2), NodeSetState(raw={})], slurmd_pods=pods)
    assert run.pods_awaited == ["cpu-1", "cpu-2"]  # gpu: no plan (its NodeSet invalid or gone)


def test_a_cluster_wakeup_is_made_once_not_at_every_event(monkeypatch):
    """The watches ask for the cluster's wake-up at every event they hand over (three of them
    per pod in a scale of 1000 pods): the first ask makes it, the others find it."""
    made = []

    class CountedWakeup(wakeup.Wakeup):
        def __init__(self):
            super().__init__()
            made.append(self)

    monkeypatch.setattr(handlers, "Wakeup", CountedWakeup)
    runtime = handlers.Runtime()
    flags = [runtime.wakeup("hpc", "research") for _ in range(3)] + [runtime.wakeup("lab", "research")]
    assert flags[0] is flags[1] is flags[2] is not flags[3]
    assert made == [flags[0], flags[3]]
