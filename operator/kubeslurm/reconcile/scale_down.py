"""Scaling a NodeSet without killing a job.

A StatefulSet removes its highest ordinals first, so those are the Slurm nodes
to empty. The protocol, one reconcile at a time (each step is level-based):
1. drain exactly those nodes (reason `kubeslurm: scale-down ...`): no new jobs land there;
2. while any of them still holds a job, keep the StatefulSet's replicas where they are;
3. when all are empty, lower replicas; Kubernetes removes the pods. Nodes that looked empty
   are drained during planning and their jobs asked for again right after (a job may have
   started between the two): still empty, the replicas are lowered in the same reconcile
   (`drained_now`) instead of the next;
4. once a removed node's pod is gone, delete its Slurm node record (before that,
   slurmd would register it again).
Scaling back up before step 3 resumes the nodes we drained, and only those.
"""

from dataclasses import dataclass, field, replace

from ..render.k8s import naming
from .slurm_control import OPERATOR_REASON_PREFIX, SlurmNode

SCALE_DOWN_REASON = "scale-down"


@dataclass
class ScalePlan:
    wanted: int  # spec.replicas
    replicas: int  # what the StatefulSet gets now
    drain: list[str] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    waiting_for_jobs: dict[str, list[str]] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.replicas == self.wanted and not (self.drain or self.resume or self.delete)

    def carried_out(self) -> "ScalePlan":
        """The plan once its Slurm commands succeeded (drained while planning, resumed and deleted
        in SyncSlurm): what is left is the replicas and the jobs waited for. The status of the run
        that deleted a scale-down's last records says Ready, not the next run's."""
        return replace(self, drain=[], resume=[], delete=[])


def ordinal_of(node_set: str, node_name: str) -> int | None:
    prefix = f"{node_set}-"
    rest = node_name[len(prefix):] if node_name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def drained_for_scale_down(node: SlurmNode) -> bool:
    return node.drained and node.reason.startswith(f"{OPERATOR_REASON_PREFIX} {SCALE_DOWN_REASON}")


def plan_scale(
    node_set: str,
    wanted: int,
    current: int,
    slurm_nodes: dict[str, SlurmNode] | None,
    jobs: dict[str, list[str]] | None,
    running_pods: set[str],
    drained_now: frozenset[str] = frozenset(),
) -> ScalePlan:
    """Decide this reconcile's replicas and Slurm actions.

    `slurm_nodes`/`jobs` are None when slurmctld cannot be asked. Then a node whose
    pod is not running cannot be running a job, and any other node is kept.
    `drained_now`: nodes this reconcile drained for the scale-down after `slurm_nodes` was
    read (`jobs` read after that drain).
    """
    ours = {}
    for name, node in (slurm_nodes or {}).items():
        ordinal = ordinal_of(node_set, name)
        if ordinal is not None and node_set in node.features:
            ours[name] = (ordinal, node)

    plan = ScalePlan(wanted=wanted, replicas=wanted)
    plan.resume = sorted(name for name, (ordinal, node) in ours.items() if ordinal < wanted and drained_for_scale_down(node))

    if wanted < current:
        leaving = [naming.node_name(node_set, i) for i in range(wanted, current)]
        busy: dict[str, list[str]] = {}
        for name in leaving:
            if slurm_nodes is None:
                if name in running_pods:
                    busy[name] = ["(slurmctld unreachable: cannot tell)"]
                continue
            if name in ours and not drained_for_scale_down(ours[name][1]) and name not in drained_now:
                plan.drain.append(name)
            held = (jobs or {}).get(name, [])
            if held:
                busy[name] = held
        plan.waiting_for_jobs = busy
        # Draining now: look at the jobs again next time, one may have started a moment ago.
        plan.replicas = current if busy or plan.drain else wanted

    # Records of nodes beyond the wanted size whose pods are gone.
    plan.delete = sorted(
        name for name, (ordinal, _) in ours.items() if ordinal >= plan.replicas and name not in running_pods
    )
    return plan
