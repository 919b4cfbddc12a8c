"""A cluster's wake-up flag, and how long a burst of events settles before the reconcile it wakes.

Watch events only wake a cluster's reconcile (handlers.py), which reads everything anew. A
burst of them, such as the StatefulSet controller deleting 1000 slurmd pods (3000 pod events
over some 12 s: marked for deletion, gone from kwok's or the kubelet's side, deleted), needs one
reconcile once it calms, not one a second: each reconcile of a 1000-node cluster asks slurmctld
for every node and job and the API server for its lists, CPU taken from the controllers doing the
work the events report (`make bench-scale`: 12 reconciles in a scale-down of 1000 pods, their
Slurm commands and reads some 2 CPU-s on the 2 cores the control plane needed).

So a reconcile that is due (woken by an event, or its time has come) during a storm, a burst of
at least STORM_EVENTS events each less than SETTLE_SECONDS after the one before, first waits
until none came for SETTLE_SECONDS, at most MAX_SETTLE_SECONDS: a storm is read every few
seconds while it lasts, and once more when it ends. A smaller burst goes at once: a cluster of a
few pods, whose reconcile costs little, is not worth the wait (a new cluster's pods and objects
bring a few dozen events in its first seconds, and its second reconcile applies what the first
could not yet), nor is the first event after a quiet spell (`kubectl scale`).

A run that lowered a StatefulSet's replicas waits for the pods it removes to go: their Slurm
node records are deleted, and the NodeSet reported Ready, by the reconcile after the last one
went. That event is the end of the storm, nothing is left to gather: the flag is set *urgent*
(await_pods_gone, pod_gone) and the reconcile starts at once, without the rest after the last
reconcile (as long as it took, up to 5 s: handlers.rest_after) or the settling.

While such pods are still going, a storm settles for up to MAX_SETTLE_WHILE_PODS_GO_SECONDS
instead: the storm is mostly their going (three events a pod, and their StatefulSet's status),
and a reconcile in the middle of it has little to do: their Slurm nodes are drained, so no job
lands on them; it would delete the records of the pods gone so far and count the NodeSet down,
for a read of every node and job (scontrol, squeue) on the cores deleting the pods. In a scale
of 1000 pods to 0 (`make bench`) that took the reconciles from 6 to 3-4 and the Slurm deletes
from 4 to 2; the pods went no faster (the README's Performance section). Other changes in that
time (an edit, a lost node) are read within the same bound.
"""

from __future__ import annotations

import threading
import time

SETTLE_SECONDS = 0.3
MAX_SETTLE_SECONDS = 2.0
MAX_SETTLE_WHILE_PODS_GO_SECONDS = 10.0  # a storm while a run's removed pods go (above)
STORM_EVENTS = 200  # 1000 pods deleted bring that many in under a second


def settle_wait(now: float, due_at: float, last_event_at: float | None, burst_events: int,
                pods_going: bool = False) -> float:
    """Seconds a reconcile due at `due_at` still waits at `now` (0: it starts), the last event
    having come at `last_event_at` (None: none yet), the `burst_events`-th of its burst;
    `pods_going`: pods the last run removed are still going. All on one monotonic clock."""
    if last_event_at is None or burst_events < STORM_EVENTS:
        return 0.0
    bound = MAX_SETTLE_WHILE_PODS_GO_SECONDS if pods_going else MAX_SETTLE_SECONDS
    return max(0.0, min(last_event_at + SETTLE_SECONDS, due_at + bound) - now)


class Wakeup:
    """threading.Event's set/clear/wait/is_set, and when it was last set, the how-manyth of its
    burst; and the pods a run waits to see go, whose last going makes the wake-up urgent."""

    def __init__(self):
        self._event = threading.Event()
        self._urgent = threading.Event()
        self._lock = threading.Lock()  # the watches' threads set it side by side
        self.last_set: float | None = None  # time.monotonic() of the last set()
        self.burst_events = 0
        self._awaited: set[str] = set()  # names of the pods the last run waits to see gone

    def await_pods_gone(self, names, still_there) -> None:
        """The last run waits for the pods `names` (of this cluster's namespace) to go; those
        `still_there(name)` no longer finds are gone already. Once none is left, or if none is
        now, the flag is set urgent. Replaces what an earlier run waited for. `still_there`
        reads what the watch keeps: the watch forgets a pod before it calls pod_gone."""
        with self._lock:
            awaited = {name for name in names if still_there(name)}
            urgent = bool(names) and not awaited
            self._awaited = awaited
        if urgent:
            self._set_urgent()

    def pod_gone(self, name: str) -> None:
        """The watch saw pod `name` deleted (after the flag was set for it as for any event)."""
        with self._lock:
            if name not in self._awaited:
                return
            self._awaited.discard(name)
            urgent = not self._awaited
        if urgent:
            self._set_urgent()

    def _set_urgent(self) -> None:
        self._urgent.set()
        self._event.set()

    @property
    def urgent(self) -> bool:
        return self._urgent.is_set()

    def set(self) -> None:
        with self._lock:
            now = time.monotonic()
            quiet = self.last_set is None or now - self.last_set >= SETTLE_SECONDS
            self.burst_events = 1 if quiet else self.burst_events + 1
            self.last_set = now
        self._event.set()

    def clear(self) -> None:
        self._event.clear()
        self._urgent.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def settle(self, stopped, poll_seconds: float = 0.1) -> None:
        """Waits as settle_wait says, the events that keep coming meanwhile and the pods still
        awaited included; returns early once `stopped` (anything true when the loop must end) is
        true, or the flag urgent."""
        due_at = time.monotonic()
        while not stopped and not self.urgent:
            with self._lock:
                left = settle_wait(time.monotonic(), due_at, self.last_set, self.burst_events,
                                   pods_going=bool(self._awaited))
            if left <= 0:
                return
            time.sleep(min(poll_seconds, left))
