"""A cluster's Slurm state as metric samples, from what one reconcile observed.

Pure: the reconcile's `scontrol show nodes`, its one `squeue` and its one `sdiag` go in,
samples come out; nothing here asks Slurm anything. Labels are bounded: NodeSet,
partition, account, state and pending reason, never a job id or a user name. The
collector (cluster_collector.py) adds `namespace` and `cluster` to every sample.
"""

import re
from dataclasses import dataclass

from ..reconcile.slurm_control import SlurmJob, SlurmNode
from .sdiag import SchedulerStatistics

PREFIX = "kubeslurm_slurm_"
# Every state a node is counted in: each node is in exactly one (node_state).
NODE_STATES = ("idle", "mixed", "allocated", "draining", "drained", "down", "future", "unknown")


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    labels: tuple[str, ...]


FAMILIES = {f.name: f for f in [
    Family("kubeslurm_slurmctld_up", "1 when slurmctld answered this reconcile's scontrol and squeue, else 0", ()),
    Family("kubeslurm_slurmdbd_up", "1 when the slurmdbd StatefulSet has a ready pod, else 0 (absent without accounting)", ()),
    Family(PREFIX + "nodes", "Slurm nodes of a NodeSet by state (one state per node)", ("nodeset", "state")),
    Family(PREFIX + "partition_nodes", "Slurm nodes of a partition by state (a node counts in each of its partitions)",
           ("partition", "state")),
    Family(PREFIX + "cpus", "CPUs of a NodeSet's Slurm nodes", ("nodeset",)),
    Family(PREFIX + "allocated_cpus", "CPUs that jobs hold", ("nodeset",)),
    Family(PREFIX + "idle_cpus", "CPUs that no job holds on nodes neither down nor drained", ("nodeset",)),
    Family(PREFIX + "gpus", "GPUs (gres gpu) of a NodeSet's Slurm nodes", ("nodeset",)),
    Family(PREFIX + "allocated_gpus", "GPUs that jobs hold (AllocTRES gres/gpu)", ("nodeset",)),
    Family(PREFIX + "idle_gpus", "GPUs that no job holds on nodes neither down nor drained", ("nodeset",)),
    Family(PREFIX + "jobs", "Jobs slurmctld holds, by state, partition and account", ("partition", "account", "state")),
    Family(PREFIX + "pending_jobs", "Pending jobs by partition and the reason they wait", ("partition", "reason")),
    Family(PREFIX + "scheduler_cycle_seconds", "Scheduler cycle time (sdiag)", ("scheduler", "stat")),
    Family(PREFIX + "scheduler_cycles", "Scheduler cycles since sdiag's counters were reset", ("scheduler",)),
    Family(PREFIX + "scheduler_depth", "Jobs a scheduler cycle looked at (sdiag)", ("scheduler", "stat")),
    Family(PREFIX + "scheduler_queue_length", "Jobs queued at the last scheduler cycle (sdiag)", ("scheduler",)),
    Family(PREFIX + "backfilled_jobs", "Jobs started by backfill since slurmctld started (sdiag)", ()),
    Family(PREFIX + "scheduler_jobs", "Jobs submitted/started/completed/canceled/failed since sdiag's counters "
           "were reset (daily, at midnight)", ("event",)),
    Family(PREFIX + "server_threads", "slurmctld's active server threads (sdiag)", ()),
    Family(PREFIX + "agent_queue_size", "RPCs queued for slurmd (sdiag)", ()),
    Family(PREFIX + "dbd_agent_queue_size", "Messages queued for slurmdbd (sdiag); grows while slurmdbd is away", ()),
]}

# sdiag statistic -> (family, labels, factor)
_SDIAG = {
    "main_last_cycle_us": ("scheduler_cycle_seconds", {"scheduler": "main", "stat": "last"}, 1e-6),
    "main_max_cycle_us": ("scheduler_cycle_seconds", {"scheduler": "main", "stat": "max"}, 1e-6),
    "main_mean_cycle_us": ("scheduler_cycle_seconds", {"scheduler": "main", "stat": "mean"}, 1e-6),
    "backfill_last_cycle_us": ("scheduler_cycle_seconds", {"scheduler": "backfill", "stat": "last"}, 1e-6),
    "backfill_max_cycle_us": ("scheduler_cycle_seconds", {"scheduler": "backfill", "stat": "max"}, 1e-6),
    "backfill_mean_cycle_us": ("scheduler_cycle_seconds", {"scheduler": "backfill", "stat": "mean"}, 1e-6),
    "main_cycles": ("scheduler_cycles", {"scheduler": "main"}, 1),
    "backfill_cycles": ("scheduler_cycles", {"scheduler": "backfill"}, 1),
    "main_mean_depth": ("scheduler_depth", {"scheduler": "main", "stat": "mean"}, 1),
    "backfill_mean_depth": ("scheduler_depth", {"scheduler": "backfill", "stat": "mean"}, 1),
    "backfill_last_depth": ("scheduler_depth", {"scheduler": "backfill", "stat": "last"}, 1),
    "main_last_queue_length": ("scheduler_queue_length", {"scheduler": "main"}, 1),
    "backfill_last_queue_length": ("scheduler_queue_length", {"scheduler": "backfill"}, 1),
    "backfilled_jobs": ("backfilled_jobs", {}, 1),
    "jobs_submitted": ("scheduler_jobs", {"event": "submitted"}, 1),
    "jobs_started": ("scheduler_jobs", {"event": "started"}, 1),
    "jobs_completed": ("scheduler_jobs", {"event": "completed"}, 1),
    "jobs_canceled": ("scheduler_jobs", {"event": "canceled"}, 1),
    "jobs_failed": ("scheduler_jobs", {"event": "failed"}, 1),
    "server_threads": ("server_threads", {}, 1),
    "agent_queue_size": ("agent_queue_size", {}, 1),
    "dbd_agent_queue_size": ("dbd_agent_queue_size", {}, 1),
}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def sample(name: str, value: float, **labels: str) -> Sample:
    if tuple(labels) != FAMILIES[name].labels:  # one label set per family, or Prometheus rejects the scrape
        raise ValueError(f"{name} takes labels {FAMILIES[name].labels}, not {tuple(labels)}")
    return Sample(name, tuple(labels.items()), float(value))


def node_state(node: SlurmNode) -> str:
    """The one state a node counts in: down first, then drain (draining while jobs still hold it)."""
    if node.down:
        return "down"
    base = node.base_state.lower()
    if node.drained:
        return "draining" if base in ("allocated", "mixed") else "drained"
    return base if base in NODE_STATES else "unknown"


def node_set_of(node: SlurmNode, node_sets: list[str]) -> str:
    """The NodeSet a node belongs to: its feature named like a NodeSet (slurmd registers it), else ""."""
    return next((f for f in node.features if f in node_sets), "")


def pending_reason(reason: str) -> str:
    """squeue's %r cut to its leading word: "ReqNodeNotAvail, UnavailableNodes:h100-[0-1]" names nodes."""
    return re.split(r"[\s,:(]", reason.strip(), maxsplit=1)[0] or "None"


def slurm_state_samples(
    node_sets: list[str],
    nodes: list[SlurmNode] | None,
    jobs: list[SlurmJob] | None,
    scheduler: SchedulerStatistics | None,
    slurmdbd_up: bool | None,
) -> list[Sample]:
    """Every sample of one cluster. `nodes` None means slurmctld did not answer: only the up
    gauges are reported then (no stale counts); `slurmdbd_up` None means no accounting."""
    samples = [sample("kubeslurm_slurmctld_up", nodes is not None and jobs is not None)]
    if slurmdbd_up is not None:
        samples.append(sample("kubeslurm_slurmdbd_up", slurmdbd_up))
    if nodes is None or jobs is None:
        return samples
    samples += _node_samples(node_sets, nodes)
    samples += _job_samples(jobs)
    for key, value in sorted((scheduler or {}).items()):
        if key in _SDIAG:
            family, labels, factor = _SDIAG[key]
            samples.append(sample(PREFIX + family, value * factor, **labels))
    return samples


def _node_samples(node_sets: list[str], nodes: list[SlurmNode]) -> list[Sample]:
    by_set: dict[str, dict[str, int]] = {name: dict.fromkeys(NODE_STATES, 0) for name in node_sets}
    by_partition: dict[str, dict[str, int]] = {}
    resources: dict[str, list[int]] = {name: [0] * 6 for name in node_sets}
    for node in nodes:
        state, node_set = node_state(node), node_set_of(node, node_sets)
        by_set.setdefault(node_set, dict.fromkeys(NODE_STATES, 0))[state] += 1
        for partition in node.partitions:
            by_partition.setdefault(partition, dict.fromkeys(NODE_STATES, 0))[state] += 1
        usable = state not in ("down", "drained", "draining")
        totals = resources.setdefault(node_set, [0] * 6)
        for i, value in enumerate((
            node.cpus, node.allocated_cpus, node.cpus - node.allocated_cpus if usable else 0,
            node.gpus, node.allocated_gpus, node.gpus - node.allocated_gpus if usable else 0,
        )):
            totals[i] += value
    samples = []
    for node_set, states in sorted(by_set.items()):
        samples += [sample(PREFIX + "nodes", count, nodeset=node_set, state=state) for state, count in states.items()]
    for partition, states in sorted(by_partition.items()):
        samples += [sample(PREFIX + "partition_nodes", count, partition=partition, state=state) for state, count in states.items()]
    names = ("cpus", "allocated_cpus", "idle_cpus", "gpus", "allocated_gpus", "idle_gpus")
    for node_set, totals in sorted(resources.items()):
        samples += [sample(PREFIX + name, value, nodeset=node_set) for name, value in zip(names, totals)]
    return samples


def _job_samples(jobs: list[SlurmJob]) -> list[Sample]:
    by_state: dict[tuple[str, str, str], int] = {}
    pending: dict[tuple[str, str], int] = {}
    for job in jobs:
        key = (job.partition, job.account, job.state.lower())
        by_state[key] = by_state.get(key, 0) + 1
        if job.state == "PENDING":
            key = (job.partition, pending_reason(job.reason))
            pending[key] = pending.get(key, 0) + 1
    return [
        *(sample(PREFIX + "jobs", n, partition=p, account=a, state=s) for (p, a, s), n in sorted(by_state.items())),
        *(sample(PREFIX + "pending_jobs", n, partition=p, reason=r) for (p, r), n in sorted(pending.items())),
    ]
