"""PodDisruptionBudgets: they protect running work without blocking node drains forever.

- slurmd: only pods whose Slurm node runs a job are protected (maxUnavailable 0 over
  the pods the operator labels `kubeslurm.io/running-jobs=true`). `kubectl drain`
  evicts idle slurmd pods at once and waits for busy ones; the operator drains the
  Slurm nodes on a cordoned Kubernetes node, so no new job starts there and the wait
  ends when the running jobs do (bounded by the partitions' MaxTime). A budget over
  all slurmd pods would instead either allow killing jobs or block every drain.
- slurmctld with a backup: at most one of the two at a time, so a drain never takes
  both. Without a backup there is no budget: evicting the only slurmctld costs a
  short pause in scheduling, not a job (state is on its PVC, jobs run on slurmd),
  and a budget of "keep 1 of 1" would block draining its node forever.
- slurmdbd, MariaDB, login: none. slurmctld buffers accounting records while
  slurmdbd is away; a single-replica budget could only ever block drains.

unhealthyPodEvictionPolicy AlwaysAllow: a pod that is not ready protects nothing
(a broken slurmd runs no job well), so it never holds up a drain.
"""

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta


def _budget(name: str, owner: SlurmCluster | NodeSet, object_labels: dict[str, str], selector: dict[str, str], max_unavailable: int) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(name, owner, object_labels),
        "spec": {
            "maxUnavailable": max_unavailable,
            "selector": {"matchLabels": dict(selector)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def running_jobs_disruption_budget(node_set: NodeSet) -> dict:
    cluster, name = node_set.spec.cluster_name, node_set.metadata.name
    selector = {**labels.selector_labels(cluster, labels.SLURMD, name), labels.RUNNING_JOBS: "true"}
    return _budget(
        naming.running_jobs_disruption_budget(name), node_set,
        labels.object_labels(cluster, labels.SLURMD, name), selector, max_unavailable=0,
    )


def controller_disruption_budget(cluster: SlurmCluster) -> dict:
    """Only for a cluster with a backup controller (see the module docstring)."""
    if not cluster.spec.controller.backup:
        raise ValueError("a controller budget without a backup slurmctld would block draining its node forever")
    name = cluster.metadata.name
    return _budget(
        naming.controller_disruption_budget(name), cluster, labels.object_labels(name, labels.CONTROLLER),
        labels.selector_labels(name, labels.CONTROLLER), max_unavailable=1,
    )
