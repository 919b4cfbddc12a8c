"""The operator's own metrics: reconciles and their steps, Kubernetes API calls, Slurm commands.

Registered in prometheus_client's default registry, next to its process and Python
collectors. Label values are bounded: namespace and cluster, step names, object kinds,
verbs, Slurm command names; never an object name other than the cluster's.
"""

import subprocess
from contextlib import contextmanager
import time
from typing import Callable

from prometheus_client import Counter, Gauge, Histogram

from .cluster_collector import SLURM_STATE

# A reconcile takes tens of milliseconds against a quiet API server and seconds while
# it talks to Slurm through pod exec; steps are mostly faster.
RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
SLURM_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

RECONCILE_DURATION = Histogram(
    "kubeslurm_reconcile_duration_seconds",
    "One reconcile of a SlurmCluster and its NodeSets; outcome succeeded, failed (a step failed) or error (a bug)",
    ["namespace", "cluster", "outcome"], buckets=RECONCILE_BUCKETS,
)
STEP_DURATION = Histogram(
    "kubeslurm_reconcile_step_duration_seconds",
    "One named step of a reconcile (LoadSpec, ObserveSlurm, Apply, ...); outcome succeeded or failed",
    ["namespace", "cluster", "step", "outcome"], buckets=RECONCILE_BUCKETS,
)
API_WRITES = Counter(
    "kubeslurm_api_writes_total",
    "Writes to the Kubernetes API by kind and verb (apply, create, delete, patch, patch-status) and HTTP code",
    ["namespace", "kind", "verb", "code"],
)
API_READS = Counter(
    "kubeslurm_api_reads_total", "Reads from the Kubernetes API by kind and verb (get, list)", ["namespace", "kind", "verb"],
)
SLURM_COMMANDS = Histogram(
    "kubeslurm_slurm_command_duration_seconds",
    "Slurm commands the operator ran in slurmctld's pod; result ok, exit (non-zero exit code) or error (did not run)",
    ["namespace", "cluster", "command", "result"], buckets=SLURM_BUCKETS,
)
PENDING_WAKEUPS = Gauge(
    "kubeslurm_pending_wakeups", "Clusters nudged by a watch event whose reconcile has not started yet",
)
CLUSTERS = Gauge("kubeslurm_clusters", "SlurmClusters the operator runs a reconcile loop for")

_PER_CLUSTER = (RECONCILE_DURATION, STEP_DURATION, SLURM_COMMANDS)


def forget_cluster(namespace: str, cluster: str) -> None:
    """A deleted cluster's series go: its Slurm state and its reconcile and command histograms."""
    SLURM_STATE.forget(namespace, cluster)
    for metric in _PER_CLUSTER:
        metric.remove_by_labels({"namespace": namespace, "cluster": cluster})


def slurm_command_name(argv: list[str]) -> str:
    """"scontrol update", "squeue", "sacctmgr add", ...: the program and, for the ones with
    subcommands, the subcommand; `env VAR=x` in front is skipped. Never a node, job or user."""
    words = list(argv)
    if words and words[0] == "env":
        words = [w for w in words[1:] if "=" not in w]
    if not words:
        return ""
    program = words[0].rsplit("/", 1)[-1]
    if program in ("scontrol", "sacctmgr"):
        sub = next((w for w in words[1:] if not w.startswith("-")), "")
        return f"{program} {sub}".strip()
    return program


def measured_runner(run: Callable, namespace: str, cluster: str) -> Callable:
    """`run` (a CommandRunner), with each command's duration and result recorded."""

    def measured(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        start, result = time.monotonic(), "error"
        try:
            completed = run(argv, timeout=timeout)
            result = "ok" if completed.returncode == 0 else "exit"
            return completed
        finally:
            SLURM_COMMANDS.labels(namespace, cluster, slurm_command_name(argv), result).observe(time.monotonic() - start)

    return measured


@contextmanager
def timed_reconcile(namespace: str, cluster: str):
    """Times the block as one reconcile: succeeded, failed (StepFailed, a step said why) or error."""
    from ..reconcile.run_state import StepFailed  # the reconcile package imports this module

    start, outcome = time.monotonic(), "error"
    try:
        yield
        outcome = "succeeded"
    except StepFailed:
        outcome = "failed"
        raise
    finally:
        RECONCILE_DURATION.labels(namespace, cluster, outcome).observe(time.monotonic() - start)


@contextmanager
def timed_step(namespace: str, cluster: str, step: str):
    start, outcome = time.monotonic(), "failed"
    try:
        yield
        outcome = "succeeded"
    finally:
        STEP_DURATION.labels(namespace, cluster, step, outcome).observe(time.monotonic() - start)
