"""What one reconcile observed of its cluster's Slurm, handed to the metrics endpoint.

No Slurm command of its own: the nodes, jobs and scheduler statistics are the ones the
ObserveSlurm step read (run_state.Run); slurmdbd's health is its StatefulSet's, as read by
ObserveKubernetes.
"""

from ..metrics.cluster_collector import SLURM_STATE
from ..metrics.slurm_state import slurm_state_samples
from ..ownership import STATEFUL_SET
from kubeslurm.render.k8s import naming
from .run_state import Run


def publish_cluster_metrics(run: Run) -> None:
    meta = run.cluster.metadata
    samples = slurm_state_samples(
        node_sets=[state.raw["metadata"]["name"] for state in run.node_sets],
        nodes=list(run.slurm_nodes.values()) if run.slurm_nodes is not None else None,
        jobs=run.slurm_jobs,
        scheduler=run.scheduler_statistics,
        slurmdbd_up=slurmdbd_up(run),
    )
    SLURM_STATE.publish(meta.namespace, meta.name, samples)


def slurmdbd_up(run: Run) -> bool | None:
    """A ready slurmdbd pod; None when the cluster has no accounting."""
    if not run.cluster.spec.accounting.enabled:
        return None
    live = run.live.get((STATEFUL_SET.kind, naming.accounting_statefulset(run.cluster.metadata.name))) or {}
    return bool((live.get("status") or {}).get("readyReplicas"))
