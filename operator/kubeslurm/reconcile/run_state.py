"""What one reconcile of a SlurmCluster has learned so far; each step reads and adds to it.

Everything read from the API server and from Slurm is read once per reconcile and kept
here, so later steps (apply, prune, Slurm sync, status) decide from the same snapshot.
"""

from dataclasses import dataclass, field

from ..api import NodeSet, SlurmCluster
from ..metrics.sdiag import SchedulerStatistics
from ..ownership import NODE_SET
from .scale_down import ScalePlan, ordinal_of
from .slurm_access import pod_ready
from .slurm_control import SlurmControl, SlurmJob, SlurmNode
from .state_volume import StateVolumeProblem, VolumeUsage


class StepFailed(Exception):
    """A step that stopped the run. `waiting`: for something expected to come (awaited_node_sets),
    said in Ready without a Warning Event and without Degraded."""

    def __init__(self, step: str, reason: str, message: str, *, waiting: bool = False):
        super().__init__(f"{step}: {message}")
        self.step, self.reason, self.message, self.waiting = step, reason, message, waiting


@dataclass
class NodeSetState:
    raw: dict
    model: NodeSet | None = None
    error: str | None = None
    plan: ScalePlan | None = None
    live_replicas: int = 0
    ready_replicas: int = 0

    def count_pods(self, pods: list[dict]) -> None:
        """live_replicas and ready_replicas from the NodeSet's pods as this run read them, counted
        as the StatefulSet controller counts them (a pod with a phase, terminating ones too; those
        Running and Ready). Not its status: that follows the pods at the controller's next sync, so
        the run woken by a scale-down's last pod going reported a pod left, and the NodeSet said 0
        only a reconcile later."""
        self.live_replicas = sum(1 for pod in pods if (pod.get("status") or {}).get("phase"))
        self.ready_replicas = sum(1 for pod in pods if pod_ready(pod))


@dataclass
class Run:
    raw: dict
    cluster: SlurmCluster | None = None
    node_sets: list[NodeSetState] = field(default_factory=list)
    database_password: str | None = None
    config_hash_key: bytes | None = None  # keys the hash of slurmdbd.conf (render/k8s/config_hash.py)
    # sssd.conf and ca.crt in ldap mode (spec.identity), read by ReadDirectorySettings
    directory_files: dict[str, str] | None = None
    # Kubernetes, read once: the cluster's listed objects by (kind, name), its slurmd
    # pods, the Kubernetes nodes (only when there are slurmd pods), the controller pods.
    live: dict[tuple[str, str], dict] = field(default_factory=dict)
    slurmd_pods: list[dict] = field(default_factory=list)
    k8s_nodes: dict[str, dict] = field(default_factory=dict)
    controller_pod: dict | None = None  # the primary slurmctld's
    backup_controller_pod: dict | None = None  # with spec.controller.backup
    # Slurm, read once (None while slurmctld does not answer)
    slurm: SlurmControl | None = None
    slurm_nodes: dict[str, SlurmNode] | None = None
    slurm_jobs: list[SlurmJob] | None = None
    scheduler_statistics: SchedulerStatistics | None = None  # sdiag, for the metrics only
    # the controller's state volume as df sees it in the controller pod (None: not measured
    # this time), and what SyncSlurm made of it (state_volume.py)
    state_volume: VolumeUsage | None = None
    state_volume_problem: StateVolumeProblem | None = None
    desired: list[dict] = field(default_factory=list)
    progressing: list[str] = field(default_factory=list)
    applied_config_hash: str | None = None
    topology_nodes_hash: str | None = None
    # Set when this run acted so that the next run acts on at once, and no watch event will
    # say so (the operator's own status writes wake nothing: change_filter.py). A run whose
    # Slurm commands changed nodes counts too (SlurmControl.changed_nodes; handlers.next_wait).
    again_soon: bool = False
    # The longest the next run may wait (None: the resync period): a step that follows something
    # no event announces sets it (a preempted placeholder job, bridge_step).
    look_again_within: float | None = None
    # account -> users kubeslurm has made in Slurm (status.appliedAccounts), once SyncSlurm knows
    applied_accounts: dict[str, list[str]] | None = None
    # in ldap mode: the users of spec.accounts the directory lacks, once CheckDirectoryUsers asked (directory_users)
    users_missing_from_directory: list[str] | None = None
    # the uid assignment (status.unixIds), recorded before anything is rendered with it
    unix_ids: dict[str, int] | None = None
    # status.devicePluginDeployed as the Prune step left it (None: not decided this run, the old stands)
    device_plugin_deployed: bool | None = None

    @property
    def pods_awaited(self) -> list[str]:
        """The slurmd pods this run's scale plans remove (an ordinal at or above the replicas
        their StatefulSet gets): the next run waits to see them go (wakeup.py)."""
        replicas = {state.model.metadata.name: state.plan.replicas for state in self.node_sets
                    if state.model is not None and state.plan is not None}
        awaited = []
        for pod in self.slurmd_pods:
            meta = pod["metadata"]
            node_set = (meta.get("labels") or {}).get(NODE_SET)
            ordinal = ordinal_of(node_set, meta["name"]) if node_set in replicas else None
            if ordinal is not None and ordinal >= replicas[node_set]:
                awaited.append(meta["name"])
        return awaited

    def pods_of(self, node_set: str) -> list[dict]:
        """The slurmd pods of NodeSet `node_set` (by their label), as this run read them."""
        return [pod for pod in self.slurmd_pods if (pod["metadata"].get("labels") or {}).get(NODE_SET) == node_set]

    @property
    def models(self) -> list[NodeSet]:
        """The NodeSets whose spec is valid: the ones rendered and planned."""
        return [state.model for state in self.node_sets if state.model is not None]
