"""replaceUnhealthy: a node drained for its health gets a new pod once no job runs on it.

A NodeSet with spec.replaceUnhealthy has the pod of such a node deleted; its StatefulSet
makes a new one under the same name, which registers as the same Slurm node. Drained for
its health means a reason written by the image's health check (`kubeslurm: health
check: ...`) or by the operator for its Kubernetes node (a listed condition, the
drain-reason annotation, a cordon). Not replaced: a node whose Kubernetes node is NotReady
(its pod cannot stop cleanly; lost_slurmd.py handles it), drains by people, by the
scale-down or by a pod's own drain-reason annotation (someone asked for a drain, not a
new pod).

While a Kubernetes node has reported trouble (a listed condition, the annotation) the
pods of such NodeSets are kept off it: the StatefulSet's pod template excludes it by name
(render/slurmd/statefulset.py), and the exclusion goes once the trouble does. A cordoned
node gets no new pods anyway.

The drain outlives the old pod (its preStop hook keeps a drain's reason when it marks the
node DOWN), and is lifted by what set it: the health check passing on the new pod, or the
operator seeing the new pod Ready on an untroubled Kubernetes node. A pod whose check
keeps failing is replaced again each time it is drained again: no job is ever on it.
"""

from collections.abc import Collection, Iterable

from .. import ownership
from ..api.node_health import NodeCondition
from .node_health import HEALTH_REASON, NOT_READY, reported_trouble
from .slurm_access import pod_ready
from .slurm_control import OPERATOR_REASON_PREFIX, SlurmJob, SlurmNode, jobs_holding

HEALTH_CHECK_REASON = f"{OPERATOR_REASON_PREFIX} health check:"
REPLACEABLE = (HEALTH_CHECK_REASON, f"{OPERATOR_REASON_PREFIX} {HEALTH_REASON} ")


def avoided_nodes(k8s_nodes: dict[str, dict], conditions: Iterable[NodeCondition]) -> list[str]:
    """Kubernetes nodes new pods of replaceUnhealthy NodeSets must not go to."""
    conditions = tuple(conditions)
    return sorted(name for name, node in k8s_nodes.items() if reported_trouble(node, conditions))


def replaced_for_health(slurm: SlurmNode) -> bool:
    return slurm.drained and slurm.reason.startswith(REPLACEABLE) and not slurm.reason.endswith(NOT_READY)


def replacements(
    pods: list[dict], slurm_nodes: dict[str, SlurmNode], jobs: list[SlurmJob], node_sets: Collection[str],
) -> dict[str, str]:
    """Pod -> why, for the pods to delete now: of a NodeSet in `node_sets` (those with
    replaceUnhealthy), Ready, not terminating, their Slurm node drained for its health,
    idle (no job holds it, nothing completing) and not yet DOWN (the preStop hook's mark)."""
    names = [pod["metadata"]["name"] for pod in pods]
    held = jobs_holding(jobs, names)
    delete: dict[str, str] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        slurm = slurm_nodes.get(name)
        if (
            (pod["metadata"].get("labels") or {}).get(ownership.NODE_SET) in node_sets
            and not pod["metadata"].get("deletionTimestamp") and pod_ready(pod)
            and slurm is not None and replaced_for_health(slurm)
            and slurm.base_state == "IDLE" and not slurm.states & {"DOWN", "COMPLETING", "NOT_RESPONDING"}
            and not held[name]
        ):
            delete[name] = slurm.reason.removeprefix(f"{OPERATOR_REASON_PREFIX} ")
    return delete
