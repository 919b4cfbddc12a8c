"""Slurm-scheduled pods brought into line with their placeholder jobs: one level-based pass.

Observe (the bridged namespaces' pods with our schedulerName, one squeue of the bridge users'
jobs), decide (bridge_plan.plan_bridge, pure), act. Acting is ordered so that GPUs are never
double-booked: releases and cancels first; a pod is bound only after the hold file is on every
node of its job and the job, read again, still runs (otherwise its epilog may have passed
before the hold existed: the hold is removed and the pod waits for the next pass).

Nothing is stored between passes; an action that fails is retried by the next pass, whose
decision starts again from what Slurm and Kubernetes say. The operator runs it as the reconcile
step SyncBridge (bridge_step.py), which passes in its accesses.
A GPU pod's indices go into the placement record before its Binding (PlacementRecord).
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Callable, Collection

from kubernetes.client.rest import ApiException

from ..api import SlurmCluster
from ..api.bridge import scheduler_name
from ..ownership import CONFIG_MAP, POD
from ..render.bridge.placeholder_job import PlaceholderRequest, hold_argv, release_argv
from ..render.bridge.placements import Placement, placement_data, placements_config_map, placements_config_map_name
from ..render.bridge.pod_binding import PENDING_REASON, binding, pending_condition_patch
from .bridge_plan import BridgedPod, BridgePlan, PodGroup, plan_bridge
from .bridge_pods import bridged_pod, placeholder_request, unmapped_problem
from .events import EventRecorder
from .kube_api import KubeApi
from .slurm_control import SlurmCommandError, SlurmControl

log = logging.getLogger(__name__)

# (Slurm node name = slurmd pod name, argv) -> the command's result, run as root in that
# slurmd pod's container (pod_exec_runner in the operator).
SlurmdRunner = Callable[[str, list[str]], subprocess.CompletedProcess]


class BridgeSyncFailed(RuntimeError):
    pass


@dataclass
class BridgeAccess:
    kube: KubeApi
    slurm: SlurmControl
    on_slurmd: SlurmdRunner
    events: EventRecorder | None = None  # Events on the pods: what Slurm did with them

    def tell(self, pod: dict, reason: str, message: str, warning: bool = False) -> None:
        if self.events is not None:
            (self.events.warning if warning else self.events.normal)(pod, reason, message)


def kubernetes_nodes_of(slurmd_pods: list[dict]) -> dict[str, str]:
    """Slurm node name -> the Kubernetes node its slurmd pod runs on (scheduled pods only)."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in slurmd_pods if (p.get("spec") or {}).get("nodeName")}


def sync_bridge(cluster: SlurmCluster, slurmd_pods: list[dict], access: BridgeAccess,
                asking: Collection[str] = (), bridged_nodes_only: bool = False) -> BridgePlan:
    """One pass; returns what it decided. Raises BridgeSyncFailed naming every action that failed.

    asking: namespaces where pods asking for this cluster's scheduler were seen (the operator's
    watch); those without a mapping have their unbound pods told why nothing schedules them
    (kube-scheduler ignores them too), and nothing else done: a bound pod there (its mapping
    removed while it ran) is left as it is.
    bridged_nodes_only: the cluster has a bridged NodeSet; new placeholder jobs ask for its nodes."""
    bridge = cluster.spec.bridge
    if not bridge.enabled:
        return BridgePlan()
    mappings = {m.namespace: m for m in bridge.namespaces}
    selector = f"spec.schedulerName={scheduler_name(cluster.metadata.name)}"
    raw = {p["metadata"]["uid"]: p for ns in sorted({*mappings, *asking})
           for p in access.kube.list(POD, ns, field_selector=selector)
           if ns in mappings or not (p.get("spec") or {}).get("nodeName")}
    pods = []
    for pod in raw.values():
        namespace = pod["metadata"]["namespace"]
        mapping = mappings.get(namespace)
        unmapped = None if mapping else unmapped_problem(namespace, cluster.metadata.namespace, cluster.metadata.name)
        pods.append(bridged_pod(pod, mapping, unmapped))
    jobs = access.slurm.placeholder_jobs(sorted({m.user for m in mappings.values()}))
    plan = plan_bridge(pods, jobs, kubernetes_nodes_of(slurmd_pods))
    failures: list[str] = []
    record = PlacementRecord(access, cluster)

    def attempt(what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except (ApiException, SlurmCommandError, BridgeSyncFailed, ValueError) as error:
            failures.append(f"{what}: {str(error).strip()[:300]}")

    for job_id, nodes in plan.release:
        attempt(f"release job {job_id}", lambda: _on_each(access, nodes, release_argv(job_id)))
    for job_id in plan.cancel:
        attempt(f"cancel job {job_id}", lambda: access.slurm.cancel_placeholder(job_id))
    for pod in plan.delete_pods:
        attempt(f"delete pod {pod.namespace}/{pod.name}", lambda: _delete(access, raw[pod.uid]))
    attempt("prune the placement record", lambda: record.keep_only(set(raw)))
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    def submit(what: str, action: Callable[[], bool]) -> None:
        def counted() -> None:
            plan.submitted += action()
        attempt(what, counted)

    for pod in plan.submit:
        submit(f"submit for pod {pod.namespace}/{pod.name}",
               lambda: _submit(access, pod, raw[pod.uid], mappings[pod.namespace], now, bridged_nodes_only))
    for group in plan.submit_groups:
        submit(f"submit for pod group {group.namespace}/{group.name}",
               lambda: _submit_group(access, group, raw, mappings[group.namespace], now, bridged_nodes_only))
    for placement in plan.bind:
        attempt(f"bind pod {placement.pod.namespace}/{placement.pod.name}",
                lambda: _hold_and_bind(access, placement, raw[placement.pod.uid], record))
    for pod, message in plan.pending:
        attempt(f"show why pod {pod.namespace}/{pod.name} waits", lambda: _show_pending(access, raw[pod.uid], message, now))
    if failures:
        raise BridgeSyncFailed("; ".join(failures))
    return plan


def _on_each(access: BridgeAccess, nodes: tuple[str, ...], argv: list[str]) -> None:
    for node in nodes:
        result = access.on_slurmd(node, argv)
        if result.returncode != 0:
            raise BridgeSyncFailed(f"{' '.join(argv)} on {node} exited {result.returncode}: {(result.stderr or '').strip()}")


def _show_pending(access: BridgeAccess, raw_pod: dict, message: str, now: str) -> None:
    """The PodScheduled condition (kubectl get/wait read it) and an Event, which is what
    `kubectl describe pod` shows of it, as kube-scheduler's FailedScheduling is. Both only
    when the message changed: the plan asks for neither otherwise."""
    meta = raw_pod["metadata"]
    access.kube.patch_pod_status(meta["namespace"], meta["name"], pending_condition_patch(message, now))
    access.tell(raw_pod, PENDING_REASON, message)


def refused_message(error: SlurmCommandError) -> str:
    """sbatch's own last word (its stderr's last line), not the command line before it."""
    said = str(error).split("): ", 1)[-1]
    last = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "no reason given")
    return f"not scheduled by Slurm: {last[:300]}"


def _submit(access: BridgeAccess, pod: BridgedPod, raw_pod: dict, mapping, now: str,
            bridged_nodes_only: bool = False) -> bool:
    """Whether a job was submitted (sbatch may refuse the pod: said on the pod)."""
    request = placeholder_request(raw_pod, mapping, bridged_nodes_only)
    try:
        job_id = access.slurm.submit_placeholder(request)
    except SlurmCommandError as error:
        # Mostly the pod's own doing (more CPUs or memory than any node of the partition has):
        # said on the pod, not a failure of the cluster. sbatch is asked again each pass (a
        # NodeSet may grow); the pod is written to only when Slurm's answer changes.
        message = refused_message(error)
        if pod.pending_message != message:
            meta = raw_pod["metadata"]
            access.kube.patch_pod_status(meta["namespace"], meta["name"], pending_condition_patch(message, now))
            access.tell(raw_pod, "SlurmRefused", message, warning=True)
        return False
    access.tell(raw_pod, "SlurmJobSubmitted",
                f"Slurm job {job_id} asks for {request.cpus} CPUs, {request.memory_mib} MiB and {request.gpus} GPUs "
                f"as {request.user}, account {request.account}")
    return True


def group_request(group: PodGroup, raw: dict[str, dict], mapping, bridged_nodes_only: bool = False) -> PlaceholderRequest:
    """The one job of a pod group: each member's resources on a node of its own. ValueError
    when the members ask for different resources (a group is one job, the same on every node)."""
    requests = [placeholder_request(raw[pod.uid], mapping, bridged_nodes_only) for pod in group.members]
    shapes = {(r.cpus, r.memory_mib, r.gpus) for r in requests}
    if len(shapes) != 1:
        listed = "; ".join(f"{cpus} CPUs, {mib} MiB, {gpus} GPUs" for cpus, mib, gpus in sorted(shapes))
        raise ValueError(f"the pods of group {group.name} ask for different resources ({listed}): a group is one "
                         f"Slurm job with the same CPUs, memory and GPUs on each of its nodes")
    return replace(requests[0], group=group.name, group_uids=tuple(r.pod_uid for r in requests))


def _submit_group(access: BridgeAccess, group: PodGroup, raw: dict[str, dict], mapping, now: str,
                  bridged_nodes_only: bool = False) -> bool:
    members = [raw[pod.uid] for pod in group.members]
    try:
        request = group_request(group, raw, mapping, bridged_nodes_only)
        job_id = access.slurm.submit_placeholder(request)
    except (ValueError, SlurmCommandError) as error:
        message = refused_message(error) if isinstance(error, SlurmCommandError) else f"not scheduled by Slurm: {error}"
        for pod, raw_pod in zip(group.members, members):
            if pod.pending_message != message:
                meta = raw_pod["metadata"]
                access.kube.patch_pod_status(meta["namespace"], meta["name"], pending_condition_patch(message, now))
                access.tell(raw_pod, "SlurmRefused", message, warning=True)
        return False
    for raw_pod in members:
        access.tell(raw_pod, "SlurmJobSubmitted",
                    f"Slurm job {job_id} for pod group {group.name} asks for {len(members)} nodes with {request.cpus} CPUs, "
                    f"{request.memory_mib} MiB and {request.gpus} GPUs each, as {request.user}, account {request.account}")
    return True


def _delete(access: BridgeAccess, raw_pod: dict) -> None:
    access.tell(raw_pod, "DeletedForSlurm", "its Slurm job no longer runs (ended, preempted or cancelled): "
                "a pod Slurm placed runs only while its job does", warning=True)
    meta = raw_pod["metadata"]
    access.kube.delete(POD, meta["namespace"], meta["name"], uid=meta["uid"])


class PlacementRecord:
    """The GPU indices of each bound pod, for the kubeslurm device plugin (render/bridge/placements.py):
    read once a pass, written only when it changes. An entry is written before its pod's
    Binding (so the plugin never meets a bound GPU pod without one) and goes once the pod is
    gone from the API."""

    def __init__(self, access: BridgeAccess, cluster: SlurmCluster):
        self.access, self.cluster = access, cluster
        found = access.kube.get(CONFIG_MAP, cluster.metadata.namespace, placements_config_map_name(cluster.metadata.name))
        self.data: dict[str, str] = dict((found or {}).get("data") or {})

    def keep_only(self, pod_uids: set[str]) -> None:
        kept = {uid: entry for uid, entry in self.data.items() if uid in pod_uids}
        if kept != self.data:
            self._write(kept)

    def add(self, placement: Placement) -> None:
        wanted = {**self.data, **placement_data([placement])}
        if wanted != self.data:
            self._write(wanted)

    def _write(self, data: dict[str, str]) -> None:
        self.access.kube.apply(placements_config_map(self.cluster, data))
        self.data = data


def _hold_and_bind(access: BridgeAccess, placement, raw_pod: dict, record: PlacementRecord) -> None:
    _on_each(access, placement.slurm_nodes, hold_argv(placement.job_id))
    allocation = access.slurm.job_allocation(placement.job_id)
    if allocation.state != "RUNNING":
        # ended meanwhile: its epilog may have run before the hold existed; never bind it
        _on_each(access, placement.slurm_nodes, release_argv(placement.job_id))
        return
    pod = placement.pod
    gpus = {node: list(a.gpu_indices) for node, a in allocation.nodes.items()
            if a.gpu_indices and node in placement.slurm_nodes}
    if gpus:
        # one pod, one node (a group's member: its own node of the group's job): that node's indices are the pod's GPUs
        indices = tuple(sorted(i for node in placement.slurm_nodes for i in gpus.get(node, ())))
        record.add(Placement(pod.uid, pod.namespace, pod.name, placement.kubernetes_node, placement.job_id, indices))
    access.kube.bind(pod.namespace, binding(pod.name, pod.uid, placement.kubernetes_node))
    access.tell(raw_pod, "BoundBySlurm", f"Slurm job {placement.job_id} runs on {', '.join(placement.slurm_nodes)}: "
                f"bound to node {placement.kubernetes_node}" + (f", GPUs {gpus}" if gpus else ""))
