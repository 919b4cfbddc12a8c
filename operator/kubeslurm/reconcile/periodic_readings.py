"""Slurm readings no reconcile acts on at once: taken at most every READ_EVERY_SECONDS per cluster.

A cluster's reconcile runs at every change of its pods: while 1000 slurmd pods come or go it
runs every second or so, for as long as the scale takes. Two of the four Slurm commands it ran
each time do not follow those changes: `sdiag` (the scheduler's statistics, read only for
/metrics, which Prometheus scrapes every 15 s or more) and `df` of slurmctld's state volume
(its room, for the Degraded condition when it fills: no event announces that, so the periodic
resync finds it, RESYNC_SECONDS at most). Each is an exec in the slurmctld pod: a process in the
container and the API server's and the kubelet's work, on the nodes the scale itself keeps busy.
Here the last answer of each is kept for READ_EVERY_SECONDS and given to the reconciles that
come meanwhile; a reading that failed is not kept, so the next reconcile asks again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

READ_EVERY_SECONDS = 10.0
T = TypeVar("T")


class PeriodicReadings:
    """(namespace, cluster, what) -> the last answer and when it came."""

    def __init__(self, every: float = READ_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.every = every
        self.clock = clock
        self._kept: dict[tuple[str, str, str], tuple[float, object]] = {}
        self._lock = threading.Lock()

    def fresh(self, namespace: str, cluster: str, what: str, read: Callable[[], T]) -> T:
        """read()'s answer, or the one it gave for the same cluster less than `every` seconds ago.
        An exception from read() passes through and keeps nothing."""
        key = (namespace, cluster, what)
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and self.clock() - kept[0] < self.every:
            return kept[1]  # type: ignore[return-value]
        answer = read()
        with self._lock:
            self._kept[key] = (self.clock(), answer)
        return answer

    def forget(self, namespace: str, cluster: str) -> None:
        """A deleted cluster: a new one of the same name reads its own."""
        with self._lock:
            for key in [k for k in self._kept if k[:2] == (namespace, cluster)]:
                del self._kept[key]
