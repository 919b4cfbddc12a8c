"""`kubeslurm run`, whose Slurm commands go to the scale benchmark's native slurmctld.

    python benchmarks/scale_operator.py SLURM_PREFIX_JSON run --kubeconfig ... [kubeslurm run options]

In a cluster the operator execs Slurm's commands in the slurmctld pod; kwok's pods run
nothing, so here they run on the native slurmctld's host of testbed/native_slurm instead:
SLURM_PREFIX_JSON is the argv prefix that enters that host (NativeSlurmCluster.command).
Everything else is the operator as shipped: kopf, the handlers, the reconcile, the metrics.
The exec's own cost (a websocket per command) is not part of what the benchmark measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kubeslurm import cli
from kubeslurm.metrics.operator_metrics import measured_runner
from kubeslurm.reconcile import handlers
from kubeslurm.reconcile.slurm_access import pod_ready
from kubeslurm.reconcile.slurm_control import SlurmControl


class NativeSlurmAccess:
    """The reconciler's slurm_for: Slurm on the native host, once the controller pod is Ready (as in a cluster)."""

    def __init__(self, prefix: list[str]):
        self.prefix = prefix

    def run(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([*self.prefix, *argv], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as error:
            return subprocess.CompletedProcess(argv, 124, error.stdout or "", f"timed out after {timeout} s")

    def __call__(self, cluster, controller_pod: dict | None) -> SlurmControl | None:
        if not pod_ready(controller_pod):
            return None
        return SlurmControl(measured_runner(self.run, cluster.metadata.namespace, cluster.metadata.name))


def dump_allocations_on_sigusr1(path: str) -> None:
    """With KUBESLURM_BENCH_TRACEMALLOC=FILE: where the operator's memory is, written on SIGUSR1."""
    import signal
    import tracemalloc

    tracemalloc.start(8)

    def dump(*_):
        stats = tracemalloc.take_snapshot().statistics("traceback")
        with open(path, "w") as out:
            for stat in stats[:25]:
                out.write(f"{stat.size / 2**20:.1f} MiB in {stat.count} blocks\n")
                out.write("".join(f"    {line}\n" for line in stat.traceback.format()[-8:]))

    signal.signal(signal.SIGUSR1, dump)


class ReconcileProfile:
    """With KUBESLURM_BENCH_PROFILE=FILE: a cProfile of every reconcile (their thread only),
    appended to FILE on SIGUSR2 as the 45 entries of most cumulative time under a header
    naming the phase (scale_bench writes it to FILE.phase before it signals), then reset."""

    def __init__(self, path: str):
        import cProfile
        import signal
        import threading

        self.path, self.profile, self.lock = path, cProfile.Profile(), threading.Lock()
        signal.signal(signal.SIGUSR2, self.dump)  # here: only the main thread may set a handler

    def wrap(self, reconciler) -> None:
        reconcile = reconciler.reconcile

        def profiled(namespace, name):
            with self.lock:
                return self.profile.runcall(reconcile, namespace, name)

        reconciler.reconcile = profiled

    def dump(self, *_):
        import pstats

        try:
            phase = open(f"{self.path}.phase").read().strip()
        except OSError:
            phase = "?"
        with self.lock, open(self.path, "a") as out:
            out.write(f"==== reconciles of phase: {phase}\n")
            if self.profile.getstats():
                pstats.Stats(self.profile, stream=out).sort_stats("cumulative").print_stats(45)
            self.profile.clear()


def name_os_threads() -> None:
    """Each thread started from here on carries its Python name (15 characters) in the kernel too, where
    the benchmark reads each thread's CPU (/proc/PID/task/TID: scale_bench.operator_cpu_by_thread)."""
    import ctypes
    import threading

    set_name = ctypes.CDLL(None).prctl
    PR_SET_NAME = 15
    run = threading.Thread.run

    def named_run(thread: threading.Thread):
        set_name(PR_SET_NAME, thread.name.encode()[:15], 0, 0, 0)
        return run(thread)

    threading.Thread.run = named_run


def main() -> int:
    name_os_threads()
    if os.environ.get("KUBESLURM_BENCH_TRACEMALLOC"):
        dump_allocations_on_sigusr1(os.environ["KUBESLURM_BENCH_TRACEMALLOC"])
    access = NativeSlurmAccess(json.loads(sys.argv[1]))
    profile = ReconcileProfile(os.environ["KUBESLURM_BENCH_PROFILE"]) if os.environ.get("KUBESLURM_BENCH_PROFILE") else None
    start = handlers.RUNTIME.start

    def start_with_native_slurm(kubeconfig=None):
        start(kubeconfig)
        handlers.RUNTIME.reconciler.slurm_for = access
        if profile is not None:
            profile.wrap(handlers.RUNTIME.reconciler)

    handlers.RUNTIME.start = start_with_native_slurm
    return cli.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
