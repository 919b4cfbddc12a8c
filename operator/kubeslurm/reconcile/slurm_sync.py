"""Bring Slurm in line with the spec and with Kubernetes, through slurmctld.

In order: the state volume's room reported (state_volume.py), accounts (sacctmgr, when spec.accounts changed; associations the spec dropped are
removed, see _apply_accounts), `scontrol reconfigure` once
slurmctld runs a new configuration, topology reload when the registered nodes changed,
the running-jobs label on busy slurmd pods, lost slurmd pods marked DOWN, drains for
Kubernetes node trouble, and the scale-down protocol's drain/resume/delete. Every
decision comes from the reconcile's one snapshot (run); pure modules decide, this one acts.
"""

import hashlib
import json

from .. import ownership
from ..api import SlurmCluster
from ..render.k8s import naming
from ..render.config.accounting_commands import (
    AppliedAccounts,
    accounting_commands,
    desired_associations,
    removal_plan,
    stale_associations,
    still_applied,
)
from ..render.k8s.config_hash import CONFIG_HASH_ANNOTATION
from .events import EventRecorder
from .kube_api import KubeApi
from .lost_slurmd import lost_slurmd_actions
from .node_health import health_actions
from .replacement import replacements
from .run_state import Run
from .state_volume import reported_problem, state_volume_events, state_volume_problem


def accounts_hash(cluster: SlurmCluster) -> str:
    return hashlib.sha256(json.dumps(accounting_commands(cluster)).encode()).hexdigest()[:16]


def desired_controller_config_hash(objects: list[dict], cluster: str) -> str | None:
    """The config hash in the desired slurmctld pod template: what slurmctld should be running."""
    name = naming.controller_statefulset(cluster)
    for obj in objects:
        if obj["kind"] == "StatefulSet" and obj["metadata"]["name"] == name:
            return obj["spec"]["template"]["metadata"].get("annotations", {}).get(CONFIG_HASH_ANNOTATION)
    return None


def sync_slurm(api: KubeApi, events: EventRecorder, run: Run) -> None:
    if run.slurm is None:
        if run.node_sets:
            run.progressing.append("waiting for slurmctld to answer")
        return
    status = run.raw.get("status") or {}
    _report_state_volume(events, run, status)
    _apply_accounts(events, run, status)
    _reconfigure(events, run, status)
    _refresh_topology(run, status)
    _label_busy_pods(api, run)
    _down_lost_slurmd(events, run)
    _follow_kubernetes_node_health(events, run)
    _replace_unhealthy(api, events, run)
    _scale_down(run)


def _report_state_volume(events: EventRecorder, run: Run, status: dict) -> None:
    """A full (or nearly full) controller state volume: in Degraded (status.py) and, when that
    changes, a Warning Event; a Normal one once there is room again. Unmeasured: as reported."""
    previous = reported_problem(status.get("conditions", []))
    claim = f"{run.cluster.metadata.namespace}/{naming.controller_state_claim(run.cluster.metadata.name)}"
    run.state_volume_problem = state_volume_problem(run.state_volume, claim, previous)
    for kind, reason, message in state_volume_events(previous, run.state_volume_problem, claim):
        (events.warning if kind == "Warning" else events.normal)(run.raw, reason, message)


def _apply_accounts(events: EventRecorder, run: Run, status: dict) -> None:
    """Make Slurm's associations match spec.accounts: add and modify what the spec names (when
    its hash changed), remove what kubeslurm added earlier and the spec dropped (status.appliedAccounts).

    Level-based: with nothing changed and nothing waiting, no sacctmgr runs. A removal that
    Slurm refuses because the association has jobs stays in appliedAccounts and is tried
    again on the next reconcile; the jobs are never touched.
    """
    cluster = run.cluster
    if not cluster.spec.accounting.enabled:
        return
    desired = desired_associations(cluster)
    applied = applied_accounts(status)
    if applied is None:
        # A cluster from before status.appliedAccounts: only what the spec names now is known to be ours.
        applied = desired
    stale = stale_associations(applied, desired)
    if status.get("appliedAccountsHash") != accounts_hash(cluster):
        run.slurm.sacctmgr(accounting_commands(cluster))
        events.normal(run.raw, "AccountsApplied", f"{len(cluster.spec.accounts)} accounts in Slurm match the spec")
    waiting = []
    if stale:
        name = cluster.metadata.name
        plan = removal_plan(name, stale, desired, run.slurm.associations(name))
        waiting = run.slurm.remove_associations(plan.removals)
        for account, theirs in plan.left_to_humans.items():
            events.warning(
                run.raw, "AccountLeftInSlurm",
                f"account {account} left spec.accounts but stays in Slurm: it holds {', '.join(theirs)}, not added by "
                f"kubeslurm; remove them, then `sacctmgr delete account {account} cluster={name}`",
            )
        done = [r for r in plan.removals if r not in waiting]
        if done:
            events.normal(run.raw, "AssociationsRemoved", f"removed from Slurm (job records kept): {_described(done)}")
        if waiting:
            run.progressing.append(f"waiting for the jobs of {_described(waiting)} to end before removing them from Slurm")
    run.applied_accounts = still_applied(desired, waiting)


def applied_accounts(status: dict) -> AppliedAccounts | None:
    """status.appliedAccounts as account -> users; None when the status has none yet."""
    recorded = status.get("appliedAccounts")
    if recorded is None:
        return None
    return {entry["name"]: list(entry.get("users", [])) for entry in recorded}


def _described(removals) -> str:
    return ", ".join(f"user {r.user} in account {r.account}" if r.user else f"account {r.account}" for r in removals)


def _reconfigure(events: EventRecorder, run: Run, status: dict) -> None:
    wanted_hash = desired_controller_config_hash(run.desired, run.cluster.metadata.name)
    if status.get("appliedConfigHash") == wanted_hash:
        return
    # The controller pod rolls on a config change; only once the running one has
    # the new files does `scontrol reconfigure` push them to the configless slurmd pods.
    running_hash = (run.controller_pod or {}).get("metadata", {}).get("annotations", {}).get(CONFIG_HASH_ANNOTATION)
    if running_hash != wanted_hash:
        run.progressing.append("slurmctld is restarting with the new configuration")
        return
    if status.get("appliedConfigHash") is not None:
        run.slurm.reconfigure()
        events.normal(run.raw, "Reconfigured", "scontrol reconfigure: slurmctld and slurmd run the new configuration")
    run.applied_config_hash = wanted_hash


def _refresh_topology(run: Run, status: dict) -> None:
    """slurmctld resolves topology.conf's node names only at (re)configure time, and dynamic
    nodes register after that: without a reconfigure once they are there, multi-node jobs
    are refused ("Requested topology configuration is not available")."""
    if run.cluster.spec.topology is None or not run.slurm_nodes:
        return
    registered = hashlib.sha256(",".join(sorted(run.slurm_nodes)).encode()).hexdigest()[:16]
    if status.get("topologyNodesHash") != registered:
        run.slurm.reconfigure()
    run.topology_nodes_hash = registered


def _label_busy_pods(api: KubeApi, run: Run) -> None:
    """Keep the running-jobs label true exactly on pods whose Slurm node runs a job (the PDB protects those)."""
    for pod in run.slurmd_pods:
        node = (run.slurm_nodes or {}).get(pod["metadata"]["name"])
        if node is None:
            continue
        busy = node.base_state in ("ALLOCATED", "MIXED") or "COMPLETING" in node.states
        labelled = pod["metadata"].get("labels", {}).get(ownership.RUNNING_JOBS) == "true"
        if busy != labelled:
            api.merge_patch(
                ownership.POD, pod["metadata"]["namespace"], pod["metadata"]["name"],
                {"metadata": {"labels": {ownership.RUNNING_JOBS: "true" if busy else None}}},
            )


def _down_lost_slurmd(events: EventRecorder, run: Run) -> None:
    lost, found = lost_slurmd_actions(run.slurmd_pods, run.k8s_nodes, run.slurm_nodes or {}, run.slurm_jobs or [])
    for why, nodes in _by_reason(lost).items():
        run.slurm.down(nodes, why)
        for node in nodes:
            events.warning(run.raw, "SlurmdLost", f"{node} marked DOWN so Slurm requeues its jobs now: {why}")
    run.slurm.resume(found)


def _follow_kubernetes_node_health(events: EventRecorder, run: Run) -> None:
    actions = health_actions(
        run.slurmd_pods, run.k8s_nodes, run.slurm_nodes or {}, run.cluster.spec.node_health.drain_on_node_conditions)
    for why, nodes in _by_reason(actions.drain).items():  # one scontrol per trouble
        run.slurm.drain(nodes, why)
        for node in nodes:
            events.warning(_node_set_of(run, node), "NodeDrained", f"Slurm node {node} drained: {why}")
    run.slurm.resume(actions.resume)
    for node in actions.resume:
        events.normal(_node_set_of(run, node), "NodeResumed", f"Slurm node {node} resumed: its Kubernetes trouble is gone")


def _replace_unhealthy(api: KubeApi, events: EventRecorder, run: Run) -> None:
    node_sets = {state.model.metadata.name for state in run.node_sets if state.model is not None and state.model.spec.replace_unhealthy}
    if not node_sets:
        return
    for pod, why in replacements(run.slurmd_pods, run.slurm_nodes or {}, run.slurm_jobs or [], node_sets).items():
        found = next(p for p in run.slurmd_pods if p["metadata"]["name"] == pod)
        api.delete(ownership.POD, found["metadata"]["namespace"], pod, uid=found["metadata"].get("uid"))
        events.warning(_node_set_of(run, pod), "NodeReplaced",
                       f"pod {pod} deleted (no job on it, drained: {why}); it comes back as the same Slurm node")


def _node_set_of(run: Run, pod_name: str) -> dict:
    """The NodeSet whose pod this is (Events there show in `kubectl describe nodeset`), else the cluster."""
    pod = next((p for p in run.slurmd_pods if p["metadata"]["name"] == pod_name), None)
    node_set = ((pod or {}).get("metadata", {}).get("labels") or {}).get(ownership.NODE_SET)
    return next((state.raw for state in run.node_sets if state.raw["metadata"]["name"] == node_set), run.raw)


def _by_reason(reasons: dict[str, str]) -> dict[str, list[str]]:
    """Slurm node -> reason, as reason -> its nodes: one scontrol per reason, not per node."""
    grouped: dict[str, list[str]] = {}
    for node, why in sorted(reasons.items()):
        grouped.setdefault(why, []).append(node)
    return grouped


def _scale_down(run: Run) -> None:
    for state in run.node_sets:
        plan = state.plan
        if plan is None:
            continue
        # The nodes leaving were drained while planning (ClusterReconciler.plan_scaling).
        run.slurm.resume(plan.resume)
        run.slurm.delete_nodes(plan.delete)
        state.plan = plan.carried_out()
