"""The status of a SlurmCluster and of its NodeSets, built through the typed status models.

SlurmClusterStatus and NodeSetStatus generate the CRDs' status schema; building what
is written through them means the schema and the writes cannot drift. A status is
patched only when it differs from the live one (timestamps aside), so a steady
cluster costs no writes. Values the reconcile could not observe this time (Slurm not
answering) keep their last reported value instead of vanishing.
"""

from ..api import NodeSetStatus, SlurmClusterStatus
from ..ownership import NODE_SET_KIND, SLURM_CLUSTER, Kind
from ..render.bridge.bridged_nodes import BRIDGED_NODES_TOO_SMALL, NO_BRIDGED_NODES, bridged_nodes_problem
from ..render.k8s import naming
from ..render.k8s.labels import SLURMD, label_selector_string, selector_labels
from .conditions_report import conditions_for, same_conditions
from .directory_users import with_directory_users_condition
from .events import EventRecorder
from .kube_api import KubeApi
from .pod_problems import pod_problems
from .run_state import NodeSetState, Run, StepFailed
from .slurm_control import job_counts
from .slurm_sync import accounts_hash
from .state_volume import reported_problem

# Kept from the last status while Slurm does not answer, or while a step fails.
_SLURM_COUNTS = ("nodes", "idleNodes", "gpus", "runningJobs", "pendingJobs")
_APPLIED = ("appliedConfigHash", "appliedAccountsHash", "appliedAccounts", "topologyNodesHash")


def write_status(api: KubeApi, run: Run, failure: StepFailed | None) -> None:
    raw = run.raw
    old = raw.get("status") or {}
    _patch_if_changed(api, SLURM_CLUSTER, raw, cluster_status(run, failure, old).to_wire())
    for state in run.node_sets:
        _patch_if_changed(api, NODE_SET_KIND, state.raw, node_set_status(run, state).to_wire())


def cluster_status(run: Run, failure: StepFailed | None, old: dict) -> SlurmClusterStatus:
    fields: dict = {"observedGeneration": run.raw["metadata"].get("generation")}
    if run.slurm_nodes is not None:
        ours = list(run.slurm_nodes.values())
        fields.update(
            nodes=len(ours),
            idleNodes=sum(1 for n in ours if n.base_state == "IDLE" and not n.drained),
            gpus=sum(n.gpus for n in ours),
        )
        if run.slurm_jobs is not None:
            fields["runningJobs"], fields["pendingJobs"] = job_counts(run.slurm_jobs)
    else:
        fields.update({key: old[key] for key in _SLURM_COUNTS if key in old})
    if run.cluster is not None:
        address = naming.controller_hosts(run.cluster.metadata.name, False)[0].address
        fields["controllerEndpoint"] = f"{address}:{naming.SLURMCTLD_PORT}"
    if failure is None and run.slurm is not None:
        fields["appliedConfigHash"] = run.applied_config_hash or old.get("appliedConfigHash")
        if run.cluster.spec.accounting.enabled:
            fields["appliedAccountsHash"] = accounts_hash(run.cluster)
        if run.applied_accounts is not None:
            fields["appliedAccounts"] = [{"name": a, "users": users} for a, users in run.applied_accounts.items()]
        if run.topology_nodes_hash:
            fields["topologyNodesHash"] = run.topology_nodes_hash
    else:
        fields.update({key: old[key] for key in _APPLIED if key in old})
    deployed = run.device_plugin_deployed if run.device_plugin_deployed is not None else old.get("devicePluginDeployed")
    if deployed:
        fields["devicePluginDeployed"] = True
    # Never dropped, failure or not: pods and files carry these uids (record_unix_ids).
    unix_ids = run.unix_ids if run.unix_ids is not None else old.get("unixIds")
    if unix_ids is not None:
        fields["unixIds"] = unix_ids
    broken = [s for s in run.node_sets if s.error]
    degraded = None
    waiting = failure is not None and failure.waiting
    if failure is not None and not waiting:
        degraded = (failure.reason, f"step {failure.step}: {failure.message}")
    elif broken:
        degraded = ("NodeSetInvalid", "; ".join(s.error for s in broken))
    else:
        # Measured this run (SyncSlurm judged it), else the last report stands.
        volume = run.state_volume_problem if run.slurm is not None else reported_problem(old.get("conditions", []))
        degraded = (volume.reason, volume.message) if volume else None
    ready = failure is None and run.slurm is not None and not broken
    fields["conditions"] = conditions_for(
        old.get("conditions", []),
        run.raw["metadata"].get("generation"),
        ready=ready,
        ready_reason="SlurmUp" if ready else (
            failure.reason if waiting else "ReconcileFailed" if failure else "SlurmNotAnswering"),
        ready_message="slurmctld answers and every object is applied" if ready else (
            failure.message if waiting else "" if failure or broken else _slurmctld_message(run)),
        progressing="; ".join(run.progressing) or None,
        degraded=degraded,
    )
    fields["conditions"] = with_directory_users_condition(fields["conditions"], run, run.raw["metadata"].get("generation"))
    return SlurmClusterStatus.model_validate(fields)


def node_set_status(run: Run, state: NodeSetState) -> NodeSetStatus:
    raw = state.raw
    old = raw.get("status") or {}
    name = raw["metadata"]["name"]
    fields: dict = {
        "observedGeneration": raw["metadata"].get("generation"),
        "replicas": state.live_replicas,
        "readyReplicas": state.ready_replicas,
        "selector": label_selector_string(selector_labels(raw["spec"].get("clusterName", ""), SLURMD, name)),
    }
    if run.slurm_nodes is not None and state.model is not None:
        ours = [n for n in run.slurm_nodes.values() if name in n.features]
        fields.update(
            idleNodes=sum(1 for n in ours if n.base_state == "IDLE" and not n.drained),
            allocatedNodes=sum(1 for n in ours if n.base_state in ("ALLOCATED", "MIXED")),
            drainedNodes=sum(1 for n in ours if n.drained),
            downNodes=sum(1 for n in ours if n.down),
        )
    waiting = state.plan.waiting_for_jobs if state.plan else {}
    ready = (
        state.model is not None and state.ready_replicas >= state.model.spec.replicas
        and state.plan is not None and state.plan.settled
    )
    fields["conditions"] = conditions_for(
        old.get("conditions", []),
        raw["metadata"].get("generation"),
        ready=ready,
        ready_reason="AllNodesReady" if ready else ("InvalidSpec" if state.error else "NodesNotReady"),
        ready_message="" if ready or state.model is None else _not_ready_message(run, state),
        progressing=(f"scale-down waits for jobs on {', '.join(sorted(waiting))}" if waiting else None),
        degraded=("InvalidSpec", state.error) if state.error else _bridged_nodes_degraded(run, state, old),
    )
    return NodeSetStatus.model_validate(fields)


def _bridged_nodes_degraded(run: Run, state: NodeSetState, old: dict) -> tuple[str, str] | None:
    """A bridged NodeSet whose dedicated nodes cannot hold it (bridged_nodes_problem). Nodes not
    read this run (a failed reconcile): the last report stands."""
    if state.model is None or not state.model.spec.bridged or run.cluster is None:
        return None
    if run.k8s_nodes is not None:
        return bridged_nodes_problem(run.cluster.metadata.name, state.model, run.k8s_nodes.values())
    last = next((c for c in old.get("conditions", []) if c.get("type") == "Degraded" and c.get("status") == "True"), None)
    return (last["reason"], last.get("message", "")) if last and last.get("reason") in (
        NO_BRIDGED_NODES, BRIDGED_NODES_TOO_SMALL) else None


def _slurmctld_message(run: Run) -> str:
    """Slurm does not answer: whether the controller pod is there, and what keeps it from running."""
    pod = run.controller_pod
    if pod is None:
        return "slurmctld does not answer: its pod does not exist yet"
    problems = pod_problems([pod])
    return f"slurmctld does not answer: {problems}" if problems else "slurmctld does not answer yet"


def _not_ready_message(run: Run, state: NodeSetState) -> str:
    """How many slurmd pods are ready, and why the others are not (pod_problems). A scale-down
    that waits with every pod ready says so in Progressing, so Ready adds nothing then."""
    name = state.model.metadata.name
    problems = pod_problems(run.pods_of(name))
    if state.ready_replicas >= state.model.spec.replicas and not problems:
        return ""
    count = f"{state.ready_replicas}/{state.model.spec.replicas} slurmd pods ready"
    return f"{count}: {problems}" if problems else count


def report_cluster_not_found(api: KubeApi, events: EventRecorder, node_set: dict) -> None:
    """A NodeSet whose spec.clusterName names no SlurmCluster: say so on it, and create nothing."""
    meta = node_set["metadata"]
    cluster = (node_set.get("spec") or {}).get("clusterName")
    message = (
        f"spec.clusterName: no SlurmCluster {cluster!r} in namespace {meta['namespace']}; create it or fix the name"
    )
    old = node_set.get("status") or {}
    conditions = conditions_for(
        list(old.get("conditions", [])), meta.get("generation"), ready=False, ready_reason="ClusterNotFound",
        ready_message=message, degraded=("ClusterNotFound", message),
    )
    if same_conditions(list(old.get("conditions", [])), conditions):
        return
    status = NodeSetStatus.model_validate({"conditions": conditions, "observedGeneration": meta.get("generation")})
    api.patch_status(NODE_SET_KIND, meta["namespace"], meta["name"], status.to_wire())
    events.warning(node_set, "ClusterNotFound", message)


def _patch_if_changed(api: KubeApi, kind: Kind, raw: dict, status: dict) -> None:
    old = raw.get("status") or {}
    comparable_old = {k: v for k, v in old.items() if k != "conditions"}
    comparable_new = {k: v for k, v in status.items() if k != "conditions"}
    if comparable_old == comparable_new and same_conditions(old.get("conditions"), status["conditions"]):
        return
    # keys we no longer report are removed explicitly (merge patch keeps absent keys)
    patch = {**{k: None for k in old if k not in status}, **status}
    api.patch_status(kind, raw["metadata"]["namespace"], raw["metadata"]["name"], patch)

