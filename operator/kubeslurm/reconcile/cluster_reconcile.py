"""One level-based reconcile of a SlurmCluster and all its NodeSets, as named steps.

Everything a cluster needs is recomputed from scratch each time; an object is
written only when the live one differs from the desired one, so running this
twice in a row writes nothing the second time. A step that fails stops the run,
and its name lands in the Degraded condition and in an Event.
"""

import base64
import hashlib
import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Callable

from kubernetes.client.rest import ApiException

from ..api import ManifestError, NodeSet, SlurmCluster, parse_object
from ..render import naming
from ..render.accounting_commands import accounting_commands
from ..render.cluster_objects import (
    auth_key_secret,
    cluster_objects,
    database_password_secret,
    node_set_objects,
    owner_reference,
)
from ..render.config_hash import CONFIG_HASH_ANNOTATION
from ..render.errors import RenderError
from ..render.labels import RUNNING_JOBS, SLURMD, label_selector_string, selector_labels
from . import kinds
from .conditions_report import conditions_for, same_conditions
from .drift import contains
from .events import EventRecorder
from .kube_api import KubeApi
from .lost_slurmd import lost_slurmd_actions
from .node_health import health_actions
from .scale_down import ScalePlan, plan_scale
from .slurm_control import SlurmCommandError, SlurmControl, SlurmJob, job_counts

log = logging.getLogger(__name__)
AUTH_KEY_BYTES = 1024
APPLIED_CONFIG_ANNOTATION = "kubeslurm.io/applied-config-hash"


class StepFailed(Exception):
    def __init__(self, step: str, reason: str, message: str):
        super().__init__(f"{step}: {message}")
        self.step, self.reason, self.message = step, reason, message


@dataclass
class NodeSetState:
    raw: dict
    model: NodeSet | None = None
    error: str | None = None
    plan: ScalePlan | None = None
    live_replicas: int = 0
    ready_replicas: int = 0


@dataclass
class Run:
    """What one reconcile has learned so far; each step reads and adds to it."""

    raw: dict
    cluster: SlurmCluster | None = None
    node_sets: list[NodeSetState] = field(default_factory=list)
    database_password: str | None = None
    desired: list[dict] = field(default_factory=list)
    slurm: SlurmControl | None = None
    slurm_nodes: dict | None = None
    slurm_jobs: list[SlurmJob] | None = None
    controller_pod: dict | None = None
    progressing: list[str] = field(default_factory=list)
    applied_config_hash: str | None = None
    topology_nodes_hash: str | None = None


def _selector(cluster_name: str) -> str:
    return f"app.kubernetes.io/managed-by=kubeslurm,kubeslurm.io/cluster={cluster_name}"


def desired_controller_config_hash(objects: list[dict], cluster: str) -> str | None:
    """The config hash in the desired slurmctld pod template: what slurmctld should be running."""
    name = naming.controller_statefulset(cluster)
    for obj in objects:
        if obj["kind"] == "StatefulSet" and obj["metadata"]["name"] == name:
            return obj["spec"]["template"]["metadata"].get("annotations", {}).get(CONFIG_HASH_ANNOTATION)
    return None


def accounts_hash(cluster: SlurmCluster) -> str:
    return hashlib.sha256(json.dumps(accounting_commands(cluster)).encode()).hexdigest()[:16]


class ClusterReconciler:
    def __init__(
        self, api: KubeApi, slurm_for: Callable[[SlurmCluster, dict | None], SlurmControl | None], events: EventRecorder
    ):
        self.api = api
        self.slurm_for = slurm_for
        self.events = events

    # ---- entry point -------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> Run | None:
        raw = self.api.get(kinds.SLURM_CLUSTER, namespace, name)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return None  # garbage collection removes what we created
        run = Run(raw=raw)
        steps = [
            ("LoadSpec", self.load_spec),
            ("EnsureSecrets", self.ensure_secrets),
            ("ObserveSlurm", self.observe_slurm),
            ("PlanScaling", self.plan_scaling),
            ("Render", self.render),
            ("Apply", self.apply),
            ("Prune", self.prune),
            ("SyncSlurm", self.sync_slurm),
        ]
        try:
            for step_name, step in steps:
                try:
                    step(run)
                except StepFailed:
                    raise
                except (ApiException, SlurmCommandError, RenderError, ValueError) as error:
                    raise StepFailed(step_name, f"{step_name}Failed", _short(error)) from error
        except StepFailed as failure:
            log.warning("reconcile %s/%s failed at %s: %s", namespace, name, failure.step, failure.message)
            self.events.warning(raw, failure.reason, f"step {failure.step}: {failure.message}")
            self.write_status(run, failure)
            raise
        self.write_status(run, None)
        return run

    # ---- steps -------------------------------------------------------------
    def load_spec(self, run: Run) -> None:
        meta = run.raw["metadata"]
        try:
            run.cluster = parse_object(run.raw, f"SlurmCluster {meta['namespace']}/{meta['name']}")
        except ManifestError as error:
            raise StepFailed("LoadSpec", "InvalidSpec", str(error)) from None
        for raw in self.api.list(kinds.NODE_SET, meta["namespace"]):
            if raw["spec"].get("clusterName") != meta["name"]:
                continue
            state = NodeSetState(raw=raw)
            try:
                state.model = parse_object(raw, f"NodeSet {meta['namespace']}/{raw['metadata']['name']}")
            except ManifestError as error:
                state.error = str(error)
            run.node_sets.append(state)

    def ensure_secrets(self, run: Run) -> None:
        cluster = run.cluster
        ns = cluster.metadata.namespace
        if self.api.get(kinds.SECRET, ns, naming.auth_key_secret(cluster.metadata.name)) is None:
            self.api.create(auth_key_secret(cluster, secrets.token_bytes(AUTH_KEY_BYTES)))
            self.events.normal(run.raw, "AuthKeyCreated", "generated the Slurm auth key Secret")
        if not cluster.spec.accounting.enabled:
            return
        external = cluster.spec.accounting.database.external
        if external is not None:
            ref = external.password_secret_ref
            secret = self.api.get(kinds.SECRET, ns, ref.name)
            if secret is None or ref.key not in (secret.get("data") or {}):
                raise StepFailed(
                    "EnsureSecrets", "DatabasePasswordMissing",
                    f"spec.accounting.database.external.passwordSecretRef: Secret {ns}/{ref.name} with key "
                    f"{ref.key!r} not found; create it with the database password",
                )
            run.database_password = base64.b64decode(secret["data"][ref.key]).decode()
            return
        name = naming.database_password_secret(cluster.metadata.name)
        secret = self.api.get(kinds.SECRET, ns, name)
        if secret is None:
            secret = self.api.create(database_password_secret(cluster, secrets.token_urlsafe(24)))
        run.database_password = base64.b64decode(secret["data"]["password"]).decode()

    def observe_slurm(self, run: Run) -> None:
        run.controller_pod = self.api.get(
            kinds.POD, run.cluster.metadata.namespace, naming.controller_hosts(run.cluster.metadata.name, False)[0].name
        )
        run.slurm = self.slurm_for(run.cluster, run.controller_pod)
        if run.slurm is None:
            return
        try:
            run.slurm_nodes = {node.name: node for node in run.slurm.nodes()}
            run.slurm_jobs = run.slurm.jobs()
        except SlurmCommandError as error:
            log.info("slurmctld of %s not answering: %s", run.cluster.metadata.name, error)
            run.slurm = None

    def plan_scaling(self, run: Run) -> None:
        ns = run.cluster.metadata.namespace
        live_sets = {s["metadata"]["name"]: s for s in self.api.list(kinds.STATEFUL_SET, ns, _selector(run.cluster.metadata.name))}
        pods = self.api.list(kinds.POD, ns, _selector(run.cluster.metadata.name) + ",app.kubernetes.io/component=slurmd")
        running = {p["metadata"]["name"] for p in pods if p.get("status", {}).get("phase") in ("Running", "Pending") and p["spec"].get("nodeName")}
        for state in run.node_sets:
            if state.model is None:
                continue
            name = state.model.metadata.name
            live = live_sets.get(naming.node_set_statefulset(name))
            current = live["spec"]["replicas"] if live else 0
            state.live_replicas = (live or {}).get("status", {}).get("replicas", 0) or 0
            state.ready_replicas = (live or {}).get("status", {}).get("readyReplicas", 0) or 0
            leaving = [naming.node_name(name, i) for i in range(state.model.spec.replicas, current)]
            jobs = run.slurm.jobs_on(leaving) if run.slurm and leaving else ({} if run.slurm else None)
            state.plan = plan_scale(name, state.model.spec.replicas, current, run.slurm_nodes, jobs, running)
            if state.plan.waiting_for_jobs:
                busy = ", ".join(f"{n} (jobs {','.join(j)})" for n, j in sorted(state.plan.waiting_for_jobs.items()))
                run.progressing.append(f"NodeSet {name}: scale-down waits for jobs on {busy}")

    def placements(self, run: Run) -> dict[str, dict[str, str]]:
        """Slurm node -> labels of the Kubernetes node under its pod (topology.conf); empty without topology."""
        if run.cluster.spec.topology is None:
            return {}
        pods = self.api.list(kinds.POD, run.cluster.metadata.namespace, _selector(run.cluster.metadata.name) + ",app.kubernetes.io/component=slurmd")
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
        if not placed:
            return {}
        labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in self.api.list(kinds.NODE, None)}
        return {pod: labels.get(node, {}) for pod, node in sorted(placed.items())}

    def render(self, run: Run) -> None:
        usable = [s.model for s in run.node_sets if s.model is not None]
        try:
            run.desired = cluster_objects(
                run.cluster, usable, database_password=run.database_password, placements=self.placements(run)
            )
        except RenderError as error:
            raise StepFailed("Render", "InvalidSpec", str(error)) from None
        for state in run.node_sets:
            if state.model is None:
                continue
            objects = node_set_objects(run.cluster, state.model)
            for obj in objects:
                if obj["kind"] == "StatefulSet":
                    obj["spec"]["replicas"] = state.plan.replicas
            run.desired += objects
            # The NodeSet belongs to its cluster: deleting the cluster removes it too.
            run.desired.append(
                {
                    "apiVersion": state.raw["apiVersion"],
                    "kind": "NodeSet",
                    "metadata": {
                        "name": state.model.metadata.name,
                        "namespace": state.model.metadata.namespace,
                        "ownerReferences": [owner_reference(run.cluster)],
                    },
                }
            )

    def apply(self, run: Run) -> None:
        ns = run.cluster.metadata.namespace
        live: dict[tuple[str, str], dict] = {}
        for kind in kinds.LISTED_KINDS:
            for obj in self.api.list(kind, ns, _selector(run.cluster.metadata.name)):
                live[(kind.kind, obj["metadata"]["name"])] = obj
        for state in run.node_sets:
            live[("NodeSet", state.raw["metadata"]["name"])] = state.raw
        for obj in run.desired:
            key = (obj["kind"], obj["metadata"]["name"])
            kind = kinds.kind_of(obj)
            if kind not in kinds.LISTED_KINDS and key not in live:
                live[key] = self.api.get(kind, ns, obj["metadata"]["name"])
            current = live.get(key)
            if current is not None and contains(current, obj):
                continue
            self.api.apply(obj)

    def prune(self, run: Run) -> None:
        ns = run.cluster.metadata.namespace
        wanted = {(o["kind"], o["metadata"]["name"]) for o in run.desired}
        uid = run.raw["metadata"]["uid"]
        node_set_uids = {s.raw["metadata"]["uid"] for s in run.node_sets}
        for kind in kinds.LISTED_KINDS:
            for obj in self.api.list(kind, ns, _selector(run.cluster.metadata.name)):
                key = (kind.kind, obj["metadata"]["name"])
                owners = {ref.get("uid") for ref in obj["metadata"].get("ownerReferences", [])}
                if key in wanted or not owners & ({uid} | node_set_uids):
                    continue
                self.api.delete(kind, ns, obj["metadata"]["name"], uid=obj["metadata"]["uid"])
                self.events.normal(run.raw, "Pruned", f"deleted {kind.kind} {obj['metadata']['name']}: no longer desired")

    def sync_slurm(self, run: Run) -> None:
        if run.slurm is None:
            if run.node_sets:
                run.progressing.append("waiting for slurmctld to answer")
            return
        cluster = run.cluster
        status = run.raw.get("status") or {}
        if cluster.spec.accounting.enabled and status.get("appliedAccountsHash") != accounts_hash(cluster):
            run.slurm.sacctmgr(accounting_commands(cluster))
            self.events.normal(run.raw, "AccountsApplied", f"{len(cluster.spec.accounts)} accounts in Slurm match the spec")
        wanted_hash = desired_controller_config_hash(run.desired, cluster.metadata.name)
        if status.get("appliedConfigHash") != wanted_hash:
            # The controller pod rolls on a config change; only once the running one has
            # the new files does `scontrol reconfigure` push them to the configless slurmd pods.
            running_hash = (run.controller_pod or {}).get("metadata", {}).get("annotations", {}).get(CONFIG_HASH_ANNOTATION)
            if running_hash != wanted_hash:
                run.progressing.append("slurmctld is restarting with the new configuration")
            else:
                if status.get("appliedConfigHash") is not None:
                    run.slurm.reconfigure()
                    self.events.normal(run.raw, "Reconfigured", "scontrol reconfigure: slurmctld and slurmd run the new configuration")
                run.applied_config_hash = wanted_hash
        self.refresh_topology(run, status)
        pods = self.api.list(kinds.POD, cluster.metadata.namespace, _selector(cluster.metadata.name) + ",app.kubernetes.io/component=slurmd")
        self.label_busy_pods(pods, run.slurm_nodes or {})
        k8s_nodes = {n["metadata"]["name"]: n for n in self.api.list(kinds.NODE, None)} if pods else {}
        lost, found = lost_slurmd_actions(pods, k8s_nodes, run.slurm_nodes or {}, run.slurm_jobs or [])
        for node, why in lost.items():
            run.slurm.down(node, why)
            self.events.warning(run.raw, "SlurmdLost", f"{node} marked DOWN so Slurm requeues its jobs now: {why}")
        run.slurm.resume(found)
        drain_health, resume_health = health_actions(pods, k8s_nodes, run.slurm_nodes or {})
        for node, why in drain_health.items():
            run.slurm.drain([node], why)
        run.slurm.resume(resume_health)
        for state in run.node_sets:
            plan = state.plan
            if plan is None:
                continue
            name = state.model.metadata.name
            run.slurm.drain(plan.drain, f"scale-down of NodeSet {name} to {plan.wanted}")
            run.slurm.resume(plan.resume)
            run.slurm.delete_nodes(plan.delete)
            if plan.drain:
                self.events.normal(state.raw, "ScaleDownDraining", f"drained {', '.join(plan.drain)} before removing them")

    def refresh_topology(self, run: Run, status: dict) -> None:
        """slurmctld resolves topology.conf's node names only at (re)configure time, and dynamic
        nodes register after that: without a reconfigure once they are there, multi-node jobs
        are refused ("Requested topology configuration is not available")."""
        if run.cluster.spec.topology is None or not run.slurm_nodes:
            return
        registered = hashlib.sha256(",".join(sorted(run.slurm_nodes)).encode()).hexdigest()[:16]
        if status.get("topologyNodesHash") != registered:
            run.slurm.reconfigure()
        run.topology_nodes_hash = registered

    def label_busy_pods(self, pods: list[dict], slurm_nodes: dict) -> None:
        """Keep the running-jobs label true exactly on pods whose Slurm node runs a job (the PDB protects those)."""
        for pod in pods:
            node = slurm_nodes.get(pod["metadata"]["name"])
            if node is None:
                continue
            busy = node.base_state in ("ALLOCATED", "MIXED") or "COMPLETING" in node.states
            labelled = pod["metadata"].get("labels", {}).get(RUNNING_JOBS) == "true"
            if busy != labelled:
                self.api.merge_patch(
                    kinds.POD, pod["metadata"]["namespace"], pod["metadata"]["name"],
                    {"metadata": {"labels": {RUNNING_JOBS: "true" if busy else None}}},
                )

    # ---- status ------------------------------------------------------------
    def write_status(self, run: Run, failure: StepFailed | None) -> None:
        raw = run.raw
        old = raw.get("status") or {}
        slurm_nodes = run.slurm_nodes
        status: dict = {"observedGeneration": raw["metadata"].get("generation")}
        if slurm_nodes is not None:
            ours = list(slurm_nodes.values())
            status["nodes"] = len(ours)
            status["idleNodes"] = sum(1 for n in ours if n.base_state == "IDLE" and not n.drained)
            status["gpus"] = sum(n.gpus for n in ours)
            if run.slurm_jobs is not None:
                status["runningJobs"], status["pendingJobs"] = job_counts(run.slurm_jobs)
        else:
            for key in ("nodes", "idleNodes", "gpus", "runningJobs", "pendingJobs"):
                if key in old:
                    status[key] = old[key]
        if run.cluster is not None:
            status["controllerEndpoint"] = f"{naming.controller_hosts(run.cluster.metadata.name, False)[0].address}:{naming.SLURMCTLD_PORT}"
        if failure is None and run.slurm is not None:
            status["appliedConfigHash"] = run.applied_config_hash or old.get("appliedConfigHash")
            if run.cluster.spec.accounting.enabled:
                status["appliedAccountsHash"] = accounts_hash(run.cluster)
            if run.topology_nodes_hash:
                status["topologyNodesHash"] = run.topology_nodes_hash
        else:
            for key in ("appliedConfigHash", "appliedAccountsHash", "topologyNodesHash"):
                if key in old:
                    status[key] = old[key]
        broken = [s for s in run.node_sets if s.error]
        degraded = None
        if failure is not None:
            degraded = (failure.reason, f"step {failure.step}: {failure.message}")
        elif broken:
            degraded = ("NodeSetInvalid", "; ".join(s.error for s in broken))
        ready = failure is None and run.slurm is not None and not broken
        status["conditions"] = conditions_for(
            old.get("conditions", []),
            raw["metadata"].get("generation"),
            ready=ready,
            ready_reason="SlurmUp" if ready else ("ReconcileFailed" if failure else "SlurmNotAnswering"),
            ready_message="slurmctld answers and every object is applied" if ready else "",
            progressing="; ".join(run.progressing) or None,
            degraded=degraded,
        )
        self._patch_status_if_changed(kinds.SLURM_CLUSTER, raw, old, status)
        for state in run.node_sets:
            self.write_node_set_status(run, state)

    def write_node_set_status(self, run: Run, state: NodeSetState) -> None:
        raw = state.raw
        old = raw.get("status") or {}
        name = raw["metadata"]["name"]
        status: dict = {
            "observedGeneration": raw["metadata"].get("generation"),
            "replicas": state.live_replicas,
            "readyReplicas": state.ready_replicas,
            "selector": label_selector_string(selector_labels(raw["spec"].get("clusterName", ""), SLURMD, name)),
        }
        if run.slurm_nodes is not None and state.model is not None:
            ours = [n for n in run.slurm_nodes.values() if name in n.features]
            status["idleNodes"] = sum(1 for n in ours if n.base_state == "IDLE" and not n.drained)
            status["allocatedNodes"] = sum(1 for n in ours if n.base_state in ("ALLOCATED", "MIXED"))
            status["drainedNodes"] = sum(1 for n in ours if n.drained)
            status["downNodes"] = sum(1 for n in ours if n.down)
        waiting = state.plan.waiting_for_jobs if state.plan else {}
        ready = state.model is not None and state.ready_replicas >= state.model.spec.replicas and state.plan is not None and state.plan.settled
        status["conditions"] = conditions_for(
            old.get("conditions", []),
            raw["metadata"].get("generation"),
            ready=ready,
            ready_reason="AllNodesReady" if ready else ("InvalidSpec" if state.error else "NodesNotReady"),
            progressing=(f"scale-down waits for jobs on {', '.join(sorted(waiting))}" if waiting else None),
            degraded=("InvalidSpec", state.error) if state.error else None,
        )
        self._patch_status_if_changed(kinds.NODE_SET, raw, old, status)

    def _patch_status_if_changed(self, kind, raw: dict, old: dict, status: dict) -> None:
        comparable_old = {k: v for k, v in old.items() if k != "conditions"}
        comparable_new = {k: v for k, v in status.items() if k != "conditions"}
        if comparable_old == comparable_new and same_conditions(old.get("conditions"), status["conditions"]):
            return
        # keys we no longer report are removed explicitly (merge patch keeps absent keys)
        patch = {**{k: None for k in old if k not in status}, **status}
        self.api.patch_status(kind, raw["metadata"]["namespace"], raw["metadata"]["name"], patch)


def _short(error: Exception) -> str:
    if isinstance(error, ApiException):
        try:
            return json.loads(error.body).get("message", str(error))
        except (TypeError, ValueError):
            return f"{error.status} {error.reason}"
    return str(error)
