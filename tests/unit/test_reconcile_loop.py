"""The per-cluster reconcile loop (reconcile/handlers.py): what it keeps between reconciles."""

import gc
import threading
import weakref

from kubeslurm.reconcile import handlers
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
