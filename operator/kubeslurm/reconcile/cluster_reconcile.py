"""One level-based reconcile of a SlurmCluster and all its NodeSets, as named steps.

Everything a cluster needs is recomputed from scratch each time; an object is
written only when the live one differs from the desired one, so running this
twice in a row writes nothing the second time. A step that fails stops the run,
and its name lands in the Degraded condition and in an Event.

The phases live in their own modules: what a run knows (run_state), apply and
prune (apply_objects), talking Slurm into line (slurm_sync), status (status). This
one loads, observes (each kind read once), plans and renders.
"""

import json
import logging
import secrets
from typing import Callable

from kubernetes.client.rest import ApiException

from .. import ownership
from ..api import ManifestError, SlurmCluster, parse_object
from ..metrics.operator_metrics import forget_cluster, timed_reconcile, timed_step
from ..render.bridge.bridged_nodes import bridged_node_set_problem
from ..render.bridge.device_plugin import DevicePluginSettings
from ..render.cluster_objects import auth_key_secret, database_password_secret, desired_objects, ssh_host_key_secret
from ..render.controller.statefulset import STATE_SAVE_LOCATION
from ..render.errors import RenderError
from ..render.k8s import naming
from ..render.k8s.config_hash import config_hash_key
from ..render.k8s.name_collisions import name_collisions, object_label
from ..render.k8s.secrets import AUTH_KEY_BYTES
from . import secret_trust
from .apply_objects import apply_desired, prune_device_plugin, prune_undesired
from .awaited_node_sets import WAITING_FOR_NODE_SETS, age_seconds, awaited_node_sets, waiting_message
from .bridge_step import BridgePodNamespaces, BridgeStep, SlurmdAccess
from .directory_settings import read_directory_settings
from .directory_users import DirectoryChecks, check_directory_users
from .events import EventRecorder
from .kube_api import KubeApi
from .periodic_readings import PeriodicReadings
from .pod_cache import PodCache
from .publish_metrics import publish_cluster_metrics
from .record_unix_ids import record_unix_ids
from .replacement import avoided_nodes
from .requests_at_once import each_at_once
from .run_state import NodeSetState, Run, StepFailed
from .scale_down import plan_scale
from .slurm_control import SlurmCommandError, SlurmControl, jobs_holding
from .slurm_sync import sync_slurm
from .ssh_host_key import new_host_key
from .status import write_status
from .storage_check import claim_problems, named_claims, node_set_mount_conflict

log = logging.getLogger(__name__)


class ClusterReconciler:
    def __init__(
        self, api: KubeApi, slurm_for: Callable[[SlurmCluster, dict | None], SlurmControl | None], events: EventRecorder,
        slurmd_access: SlurmdAccess | None = None, device_plugin: DevicePluginSettings | None = None,
        bridge_pod_namespaces: BridgePodNamespaces | None = None, pod_cache: PodCache | None = None,
    ):
        self.api = api
        # The owned pods as the operator's watch keeps them (`kubeslurm run`); None: pods are listed.
        self.pod_cache = pod_cache
        # spec.bridge's GPUs: how `kubeslurm device-plugin` runs (the operator's own image and the
        # nodes' folders, from its Deployment: DevicePluginSettings.from_environment); None: its
        # DaemonSet is not rendered.
        self.device_plugin = device_plugin
        self.slurm_for = slurm_for
        self.events = events
        self.directory_checks = DirectoryChecks()
        self.periodic_readings = PeriodicReadings()  # sdiag and df: not at every reconcile of a burst
        # None: no exec into slurmd pods (tests without them); the bridge then does nothing
        self.sync_bridge = BridgeStep(api, events, slurmd_access, bridge_pod_namespaces)

    # ---- entry point -------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> Run | None:
        raw = self.api.get(ownership.SLURM_CLUSTER, namespace, name)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            forget_cluster(namespace, name)
            self.periodic_readings.forget(namespace, name)
            return None  # garbage collection removes what we created
        run = Run(raw=raw)
        steps = [
            ("LoadSpec", self.load_spec),
            ("CheckStorage", self.check_storage),
            ("RecordUnixIds", lambda run: record_unix_ids(self.api, run)),
            ("EnsureSecrets", self.ensure_secrets),
            ("ReadDirectorySettings", lambda run: read_directory_settings(self.api, run)),
            ("ObserveKubernetes", self.observe_kubernetes),
            ("ObserveSlurm", self.observe_slurm),
            ("PlanScaling", self.plan_scaling),
            ("Render", self.render),
            ("Apply", lambda run: apply_desired(self.api, run)),
            ("Prune", self.prune),
            ("SyncSlurm", lambda run: sync_slurm(self.api, self.events, run)),
            ("CheckDirectoryUsers", lambda run: check_directory_users(self.events, self.directory_checks, run)),
            ("SyncBridge", self.sync_bridge),  # Slurm-scheduled pods; nothing unless spec.bridge.enabled
        ]
        with timed_reconcile(namespace, name):
            try:
                for step_name, step in steps:
                    with timed_step(namespace, name, step_name):
                        try:
                            step(run)
                        except StepFailed:
                            raise
                        except (ApiException, SlurmCommandError, RenderError, ValueError) as error:
                            raise StepFailed(step_name, f"{step_name}Failed", _short(error)) from error
            except StepFailed as failure:
                if failure.waiting:
                    log.info("reconcile %s/%s waits at %s: %s", namespace, name, failure.step, failure.message)
                else:
                    log.warning("reconcile %s/%s failed at %s: %s", namespace, name, failure.step, failure.message)
                    self.events.warning(raw, failure.reason, f"step {failure.step}: {failure.message}")
                write_status(self.api, run, failure)
                raise
            write_status(self.api, run, None)
        return run

    # ---- steps -------------------------------------------------------------
    def prune(self, run: Run) -> None:
        prune_undesired(self.api, self.events, run)
        prune_device_plugin(self.api, self.events, run)

    def load_spec(self, run: Run) -> None:
        meta = run.raw["metadata"]
        try:
            run.cluster = parse_object(run.raw, f"SlurmCluster {meta['namespace']}/{meta['name']}")
        except ManifestError as error:
            raise StepFailed("LoadSpec", "InvalidSpec", str(error)) from None
        neighbours = []
        for raw in self.api.list(ownership.NODE_SET_KIND, meta["namespace"]):
            if raw["spec"].get("clusterName") != meta["name"]:
                neighbours.append(raw)
                continue
            state = NodeSetState(raw=raw)
            try:
                state.model = parse_object(raw, f"NodeSet {meta['namespace']}/{raw['metadata']['name']}")
            except ManifestError as error:
                state.error = str(error)
            run.node_sets.append(state)
        neighbours += [c for c in self.api.list(ownership.SLURM_CLUSTER, meta["namespace"]) if c["metadata"]["uid"] != meta["uid"]]
        self.check_names(run, neighbours)
        for state in run.node_sets:
            conflict = state.model and (node_set_mount_conflict(run.cluster, state.model)
                                        or bridged_node_set_problem(run.cluster, state.model))
            if conflict:
                state.model, state.error = None, f"NodeSet {meta['namespace']}/{state.raw['metadata']['name']}: {conflict}"
        awaited = awaited_node_sets(run.cluster, [s.raw["metadata"]["name"] for s in run.node_sets], age_seconds(run.raw))
        if awaited:
            raise StepFailed("LoadSpec", WAITING_FOR_NODE_SETS, waiting_message(run.cluster, awaited), waiting=True)

    def check_storage(self, run: Run) -> None:
        """The claims spec.storage names exist and many pods may mount them (storage_check);
        otherwise nothing is applied, so no pod is rolled onto a claim it cannot mount."""
        namespace = run.cluster.metadata.namespace
        claims = {name: self.api.get(ownership.PERSISTENT_VOLUME_CLAIM, namespace, name) for _, name, _ in named_claims(run.cluster)}
        problems = claim_problems(run.cluster, claims)
        if problems:
            raise StepFailed("CheckStorage", "StorageNotUsable", "; ".join(problems))

    def check_names(self, run: Run, neighbour_objects: list[dict]) -> None:
        """Names a cluster or NodeSet would give its objects must be free in the namespace.

        Of two objects whose names collide, the newer one is told to change: a cluster or
        NodeSet that already runs is never broken by someone else's new object. A colliding
        cluster fails the step (nothing applied); a colliding NodeSet is InvalidSpec alone.
        """
        cluster = run.cluster
        neighbours = []
        for raw in neighbour_objects:
            try:
                neighbours.append((_created(raw), parse_object(raw, f"{raw['kind']} {raw['metadata']['name']}")))
            except ManifestError:
                continue  # an invalid neighbour renders nothing, so it takes no names
        neighbours.sort(key=lambda n: n[0])  # the neighbours older than an object are then a prefix
        judged = [(run.raw, cluster)] + [(s.raw, s.model) for s in run.node_sets if s.model is not None]
        errors: dict[str, str] = {}
        found: dict[int, list] = {}  # by how many neighbours are older: usually one check for all
        for raw, model in judged:
            older = [m for created, m in neighbours if created < _created(raw)]
            if len(older) not in found:
                found[len(older)] = name_collisions(cluster, run.models, older)
            label = object_label(model)
            for error in found[len(older)]:
                if error.obj == label:
                    errors.setdefault(label, f"{error.field}: {error.message}")
        cluster_label = object_label(cluster)
        if cluster_label in errors:
            raise StepFailed("LoadSpec", "NameCollision", f"{cluster_label}: {errors[cluster_label]}")
        for state in run.node_sets:
            label = state.model and object_label(state.model)
            if label in errors:
                state.model, state.error = None, f"{label}: {errors[label]}"

    def ensure_secrets(self, run: Run) -> None:
        """The auth key, the database password and the ssh host key: used when the cluster owns them (or, for an
        external database, the spec names them), generated once when absent, and otherwise
        refused (secret_trust): the step fails naming the Secret, and nothing is created."""
        cluster = run.cluster
        ns, name = cluster.metadata.namespace, cluster.metadata.name
        key_secret = self.api.get(ownership.SECRET, ns, naming.auth_key_secret(name))
        auth_key = secret_trust.auth_key(key_secret, run.raw) if key_secret is not None else None
        accounting = cluster.spec.accounting
        generate_password = False
        if accounting.enabled and accounting.database.external is not None:
            ref = accounting.database.external.password_secret_ref
            named = self.api.get(ownership.SECRET, ns, ref.name)
            run.database_password = secret_trust.named_database_password(named, ns, ref.name, ref.key)
        elif accounting.enabled:
            generated = self.api.get(ownership.SECRET, ns, naming.database_password_secret(name))
            if generated is not None:
                run.database_password = secret_trust.generated_database_password(generated, run.raw)
            generate_password = generated is None
        generate_host_key = False
        if cluster.spec.login.ssh.enabled:
            host_key = self.api.get(ownership.SECRET, ns, naming.ssh_host_key_secret(name))
            if host_key is not None:
                secret_trust.ssh_host_key(host_key, run.raw)
            generate_host_key = host_key is None
        # Only once nothing was refused: a refused Secret leaves the cluster with nothing half made.
        if auth_key is None:
            auth_key = secrets.token_bytes(AUTH_KEY_BYTES)
            self.api.create(auth_key_secret(cluster, auth_key))
            self.events.normal(run.raw, "AuthKeyCreated", "generated the Slurm auth key Secret")
        if generate_password:
            run.database_password = secrets.token_urlsafe(24)
            self.api.create(database_password_secret(cluster, run.database_password))
        if generate_host_key:
            self.api.create(ssh_host_key_secret(cluster, new_host_key()))
            self.events.normal(run.raw, "SshHostKeyCreated", "generated the login pods' ssh host key Secret")
        run.config_hash_key = config_hash_key(auth_key)

    def observe_kubernetes(self, run: Run) -> None:
        """Every Kubernetes read the later steps need, once: the cluster's listed objects,
        its slurmd pods, the Kubernetes nodes under them and the controller pods."""
        ns, name = run.cluster.metadata.namespace, run.cluster.metadata.name

        def listed(kind: ownership.Kind, objects: list[dict]) -> None:
            for obj in objects:
                run.live[(kind.kind, obj["metadata"]["name"])] = obj
        each_at_once(lambda kind: self.api.list(kind, ns, ownership.cluster_selector(name)), ownership.LISTED_KINDS,
                     listed)
        for state in run.node_sets:
            run.live[("NodeSet", state.raw["metadata"]["name"])] = state.raw
        run.slurmd_pods = self.read_pods(ns, ownership.cluster_selector(name, ownership.SLURMD))
        # replaceUnhealthy's node exclusion must not drop out while a NodeSet has no pod for a moment.
        # Bridged NodeSets are checked against their dedicated nodes' allocatable (status.node_set_status).
        if run.slurmd_pods or any(s.model is not None and (s.model.spec.replace_unhealthy or s.model.spec.bridged)
                                  for s in run.node_sets):
            run.k8s_nodes = {n["metadata"]["name"]: n for n in self.api.list(ownership.NODE, None)}
        primary, *backup = naming.controller_hosts(name, run.cluster.spec.controller.backup)
        run.controller_pod = self.read_pod(ns, primary.name)
        if backup:
            run.backup_controller_pod = self.read_pod(ns, backup[0].name)

    def read_pods(self, namespace: str, selector: str) -> list[dict]:
        """Our pods matching selector: from the pod cache once its watch has listed, else from the API server."""
        cached = self.pod_cache.pods(namespace, selector) if self.pod_cache is not None else None
        return cached if cached is not None else self.api.list(ownership.POD, namespace, selector)

    def read_pod(self, namespace: str, name: str) -> dict | None:
        if self.pod_cache is not None and self.pod_cache.answers_for(namespace):
            return self.pod_cache.pod(namespace, name)
        return self.api.get(ownership.POD, namespace, name)

    def observe_slurm(self, run: Run) -> None:
        # Through the primary's pod, or the backup's while the primary's is not Ready: Slurm's
        # commands there reach whichever slurmctld is in control, so a lost primary stops
        # neither lost-slurmd handling nor scale-down once the backup has taken over.
        for pod in (run.controller_pod, run.backup_controller_pod):
            run.slurm = self.slurm_for(run.cluster, pod)
            if run.slurm is not None:
                break
        if run.slurm is not None:
            self.read_slurm(run)
        publish_cluster_metrics(run)

    def read_slurm(self, run: Run) -> None:
        try:
            run.slurm_nodes = {node.name: node for node in run.slurm.nodes()}
            run.slurm_jobs = run.slurm.jobs()
        except SlurmCommandError as error:
            log.info("slurmctld of %s not answering: %s", run.cluster.metadata.name, error)
            run.slurm, run.slurm_nodes, run.slurm_jobs = None, None, None
            return
        ns, name = run.cluster.metadata.namespace, run.cluster.metadata.name
        try:  # only for the metrics: a reconcile never fails for want of them
            run.scheduler_statistics = self.periodic_readings.fresh(ns, name, "sdiag", run.slurm.scheduler_statistics)
        except SlurmCommandError as error:
            log.info("sdiag of %s failed: %s", run.cluster.metadata.name, error)
        try:  # unmeasured, the last report of the state volume stands (state_volume.py)
            run.state_volume = self.periodic_readings.fresh(
                ns, name, "state volume", lambda: run.slurm.volume_usage(STATE_SAVE_LOCATION))
        except SlurmCommandError as error:
            log.info("df of %s's state volume failed: %s", run.cluster.metadata.name, error)

    def plan_scaling(self, run: Run) -> None:
        running = {
            p["metadata"]["name"] for p in run.slurmd_pods
            if p.get("status", {}).get("phase") in ("Running", "Pending") and p["spec"].get("nodeName")
        }
        replan = []  # (state, current, leaving) of the NodeSets whose leaving nodes are drained now
        for state in run.node_sets:
            if state.model is None:
                continue
            name = state.model.metadata.name
            live = run.live.get(("StatefulSet", naming.node_set_statefulset(name))) or {}
            current = live["spec"]["replicas"] if live else 0
            state.count_pods(run.pods_of(name))
            wanted = state.model.spec.replicas
            leaving = [naming.node_name(name, i) for i in range(wanted, current)]
            state.plan = plan_scale(name, wanted, current, run.slurm_nodes, _jobs_on(run, leaving), running)
            if state.plan.drain:
                run.slurm.drain(state.plan.drain, f"scale-down of NodeSet {name} to {wanted}")
                self.events.normal(state.raw, "ScaleDownDraining",
                                   f"drained {', '.join(state.plan.drain)} before removing them")
                replan.append((state, current, leaving))
        if replan:
            # Drained now and their jobs asked for again, one squeue for every NodeSet (scale_down.py,
            # step 3): when they are empty, replicas go down in this reconcile, not the next.
            run.slurm_jobs = run.slurm.jobs()
            for state, current, leaving in replan:
                state.plan = plan_scale(state.model.metadata.name, state.model.spec.replicas, current, run.slurm_nodes,
                                        _jobs_on(run, leaving), running, drained_now=frozenset(state.plan.drain))
        for state in run.node_sets:
            if state.plan is not None and state.plan.waiting_for_jobs:
                busy = ", ".join(f"{n} (jobs {','.join(j)})" for n, j in sorted(state.plan.waiting_for_jobs.items()))
                run.progressing.append(f"NodeSet {state.model.metadata.name}: scale-down waits for jobs on {busy}")

    def render(self, run: Run) -> None:
        try:
            run.desired = desired_objects(
                run.cluster, run.models, database_password=run.database_password, config_hash_key=run.config_hash_key,
                placements=_placements(run),
                replicas={s.model.metadata.name: s.plan.replicas for s in run.node_sets if s.plan is not None},
                unix_ids=run.unix_ids, directory_files=run.directory_files,
                avoided_nodes=avoided_nodes(run.k8s_nodes, run.cluster.spec.node_health.drain_on_node_conditions),
                device_plugin=self.device_plugin,
            )
        except RenderError as error:
            raise StepFailed("Render", "InvalidSpec", str(error)) from None


def _created(raw: dict) -> tuple[str, str]:
    """Creation order: RFC 3339 timestamps in UTC sort as text; the name breaks ties."""
    return raw["metadata"].get("creationTimestamp") or "", raw["metadata"]["name"]


def _jobs_on(run: Run, nodes: list[str]) -> dict[str, list[str]] | None:
    """Node -> ids of the jobs that hold it, from the run's one squeue; None while Slurm does not answer."""
    if run.slurm_jobs is None:
        return None
    return {node: [job.id for job in held] for node, held in jobs_holding(run.slurm_jobs, nodes).items()}


def _placements(run: Run) -> dict[str, dict[str, str]]:
    """Slurm node -> labels of the Kubernetes node under its pod (topology.conf); empty without topology."""
    if run.cluster.spec.topology is None:
        return {}
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in run.slurmd_pods if p["spec"].get("nodeName")}
    labels = {name: node["metadata"].get("labels", {}) for name, node in run.k8s_nodes.items()}
    return {pod: labels.get(node, {}) for pod, node in sorted(placed.items())}


def _short(error: Exception) -> str:
    if isinstance(error, ApiException):
        try:
            return json.loads(error.body).get("message", str(error))
        except (TypeError, ValueError):
            return f"{error.status} {error.reason}"
    return str(error)
