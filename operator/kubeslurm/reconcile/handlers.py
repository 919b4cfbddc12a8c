"""kopf wiring: events only nudge; one daemon per SlurmCluster does the reconciling.

Why daemons and not on.create/on.update: a cluster's desired state depends on its
NodeSets, its pods, Kubernetes nodes and Slurm itself, so every reconcile
recomputes everything (level-based) instead of reacting to one diff. Event
handlers only wake the cluster's daemon; the daemon also resyncs periodically and
backs off on errors. Daemons keep no state in the objects, so a restarted
operator with nothing to do writes nothing.
"""

import logging
import os
import threading
import time

import kopf

from .. import ownership
from ..api import GROUP, VERSION
from ..api.bridge import scheduler_name
from ..metrics.operator_metrics import CLUSTERS, PENDING_WAKEUPS, forget_cluster
from ..process_memory import return_free_memory
from ..render.bridge.device_plugin import DevicePluginSettings
from .change_filter import ChangeFilter, custom_resource_digest, kubernetes_node_digest
from .cluster_reconcile import ClusterReconciler
from .events import EventRecorder
from .kube_api import KubeApi, load_api_client
from .pod_cache import PodCache
from .filtered_watch import OTHER_SCHEDULERS_PODS, OWNED_OBJECTS, OWNED_PODS, WatchHandler, WatchSelection, start_watches
from .run_state import StepFailed
from .slurm_access import SlurmAccess
from .status import report_cluster_not_found
from .wakeup import Wakeup

log = logging.getLogger(__name__)
RESYNC_SECONDS = float(os.environ.get("KUBESLURM_RESYNC_SECONDS", "30"))
MAX_BACKOFF_SECONDS = 300.0
AGAIN_SOON_SECONDS = 1.0  # after a run that left the next step to the next run (Run.again_soon)
MAX_REST_SECONDS = 5.0  # rest_after: the longest a reconcile's events wait for the previous one's rest
URGENT_POLL_SECONDS = 0.1  # how often a rest looks for an urgent wake-up (wakeup.py)
# Steps whose failure a person fixes in an object the operator does not watch (a Secret or
# ConfigMap the spec names, a claim): the fix raises no event, so such a failure is looked at
# again after at most UNWATCHED_RETRY_SECONDS (a few reads) instead of the growing backoff.
UNWATCHED_INPUT_STEPS = frozenset({"EnsureSecrets", "ReadDirectorySettings", "CheckStorage"})
UNWATCHED_RETRY_SECONDS = 10.0
SCHEDULER_PREFIX = scheduler_name("")  # "kubeslurm-": schedulerName of a pod Slurm schedules


class Runtime:
    """Process-wide state of the operator: one API client, one reconciler, one wake-up flag per cluster."""

    def __init__(self):
        self.api: KubeApi | None = None
        self.reconciler: ClusterReconciler | None = None
        self.events: EventRecorder | None = None
        self.wakeups: dict[tuple[str, str], Wakeup] = {}
        self.loops: dict[tuple[str, str], int] = {}  # running cluster_daemons by cluster (two, briefly, on a re-create)
        # cluster name -> namespaces where a pod asked for its scheduler: the bridge tells such a
        # pod in a namespace without a mapping why it waits. Grows only: a few namespaces.
        self.bridge_pod_namespaces: dict[str, set[str]] = {}
        self.lock = threading.Lock()
        self.namespaces: list[str] | None = None  # the namespaces followed (`run --namespace`); None: all
        self.watches: list[threading.Thread] = []
        self.owned_pods: PodCache | None = None  # kept by the owned-pods watch, read by the reconciler
        self.watches_stopped = threading.Event()

    def start(self, kubeconfig: str | None = None) -> None:
        api_client = load_api_client(kubeconfig)
        self.api = KubeApi(api_client)
        self.events = EventRecorder(self.api, instance=os.environ.get("POD_NAME", "kubeslurm"))
        access = SlurmAccess(self.api, api_client)
        self.reconciler = ClusterReconciler(self.api, access, self.events, slurmd_access=access.slurmd_runner,
                                            device_plugin=DevicePluginSettings.from_environment(),
                                            bridge_pod_namespaces=self.namespaces_asking)

    def watch(self, handlers: dict[WatchSelection, WatchHandler]) -> None:
        """Starts the filtered watches (filtered_watch.py) in the namespaces the operator follows; once."""
        with self.lock:
            if self.watches:
                return
            self.watches_stopped = threading.Event()  # a fresh one: threads of an earlier start stay stopped
            # A new cache each start: what a stopped watch kept is not kept up to date.
            self.owned_pods = self.reconciler.pod_cache = PodCache()
            self.watches = start_watches(self.api, self.namespaces, handlers, self.watches_stopped,
                                         {OWNED_PODS: self.owned_pods})

    def stop_watches(self) -> None:
        """Each watch ends at its next event or when the server ends it; none waits for that."""
        with self.lock:
            self.watches_stopped.set()
            self.watches = []
            self.owned_pods = None
            if self.reconciler is not None:
                self.reconciler.pod_cache = None  # no longer kept up to date: the reconcile lists again

    def wakeup(self, namespace: str, name: str) -> Wakeup:
        # Made only for a cluster that has none yet: the watches ask for one at every event they
        # hand over (thousands in a scale of 1000 pods), and a Wakeup is three locks.
        with self.lock:
            wakeup = self.wakeups.get((namespace, name))
            if wakeup is None:
                wakeup = self.wakeups[(namespace, name)] = Wakeup()
            return wakeup

    def nudge(self, namespace: str | None, name: str | None) -> None:
        if namespace and name:
            self.wakeup(namespace, name).set()

    def loop_started(self, namespace: str, name: str) -> None:
        with self.lock:
            self.loops[(namespace, name)] = self.loops.get((namespace, name), 0) + 1

    def loop_ended(self, namespace: str, name: str) -> None:
        """A cluster's loop ended (deleted, or the operator stops): its metrics go, unless a
        cluster of the same name, made again meanwhile, has a loop of its own already. The
        wake-up flag stays: that new loop may be waiting on it."""
        with self.lock:
            left = self.loops.pop((namespace, name), 1) - 1
            if left:
                self.loops[(namespace, name)] = left
        if not left:
            forget_cluster(namespace, name)

    def nudge_named(self, name: str) -> None:
        """Every running cluster called `name`, whatever its namespace: a bridged pod names its
        cluster (schedulerName kubeslurm-<name>) but lives in a namespace of its own."""
        with self.lock:
            for (namespace, cluster), wakeup in self.wakeups.items():
                if cluster == name and (namespace, cluster) in self.loops:
                    wakeup.set()

    def saw_bridged_pod(self, cluster: str, namespace: str) -> None:
        with self.lock:
            self.bridge_pod_namespaces.setdefault(cluster, set()).add(namespace)

    def namespaces_asking(self, cluster: str) -> frozenset[str]:
        with self.lock:
            return frozenset(self.bridge_pod_namespaces.get(cluster, ()))

    def pending_wakeups(self) -> int:
        with self.lock:
            return sum(1 for key, wakeup in self.wakeups.items() if key in self.loops and wakeup.is_set())

    def clusters(self) -> int:
        with self.lock:
            return len(self.loops)


RUNTIME = Runtime()
PENDING_WAKEUPS.set_function(RUNTIME.pending_wakeups)
CLUSTERS.set_function(RUNTIME.clusters)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    # Our own Events say what happened; kopf's per-handler events would be noise and writes.
    settings.posting.enabled = False
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.watching.server_timeout = 300
    settings.execution.max_workers = int(os.environ.get("KUBESLURM_WORKERS", "8"))
    # kopf reports every handler run at INFO; our event handlers only nudge a daemon,
    # so those lines are noise. Reconcile outcomes are logged by kubeslurm itself.
    if not settings.posting.enabled and logging.getLogger().level > logging.DEBUG:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if RUNTIME.api is None:
        RUNTIME.start(os.environ.get("KUBESLURM_KUBECONFIG"))
    RUNTIME.watch(watch_handlers())


@kopf.on.login()
def login(**kwargs):
    """In a pod: the ServiceAccount. Elsewhere: --kubeconfig, then KUBECONFIG or ~/.kube/config.

    Set explicitly because kopf's default login goes through the kubernetes client,
    which reads KUBECONFIG once, when it is imported.
    """
    explicit = os.environ.get("KUBESLURM_KUBECONFIG")
    if explicit:
        os.environ["KUBECONFIG"] = explicit
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.daemon(GROUP, VERSION, "slurmclusters", cancellation_timeout=30)
def cluster_daemon(namespace, name, stopped, **_):
    """Reconcile one SlurmCluster whenever nudged, every RESYNC_SECONDS, and after errors with backoff."""
    RUNTIME.loop_started(namespace, name)
    try:
        _reconcile_until_stopped(namespace, name, stopped)
    finally:
        RUNTIME.loop_ended(namespace, name)


def _reconcile_until_stopped(namespace, name, stopped):
    wakeup = RUNTIME.wakeup(namespace, name)
    backoff = 0.0
    while not stopped:
        wakeup.clear()
        started = time.monotonic()
        try:
            run = RUNTIME.reconciler.reconcile(namespace, name)
            wait = next_wait(run)
            await_pods_gone(wakeup, namespace, run)
            # The run holds every listing it read (1000 pods are megabytes of objects): let it go
            # before the free memory is given back, not at the next reconcile.
            del run
            return_free_memory()  # what a big cluster's listings took (process_memory)
            backoff = 0.0
        except StepFailed as failure:
            wait, backoff = wait_after_failure(backoff, failure.step)
        except Exception:  # keep the daemon alive whatever happens; the next try may succeed
            log.exception("reconcile of %s/%s crashed", namespace, name)
            wait, backoff = wait_after_failure(backoff, None)
        ended = time.monotonic()
        deadline = ended + wait
        # Waiting on the wake-up flag itself starts the next reconcile the moment a watch
        # event sets it (no polling delay); `stopped` is looked at every half second.
        while not stopped and time.monotonic() < deadline:
            if wakeup.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
                break
        # ... but never sooner than rest_after allows: the events that come meanwhile are taken
        # by that one reconcile.
        # An urgent wake-up (the last pod a scale-down removes went: wakeup.py) waits for neither.
        rest_until = ended + rest_after(ended - started)
        while not stopped and not wakeup.urgent and time.monotonic() < rest_until:
            time.sleep(min(URGENT_POLL_SECONDS, max(0.0, rest_until - time.monotonic())))
        # ... and once a burst of events settles (wakeup.py): one reconcile takes it.
        wakeup.settle(stopped)


def await_pods_gone(wakeup: Wakeup, namespace: str, run) -> None:
    """The pods `run` removes, as the wake-up's to wait for; with the owned-pods watch only,
    which reports their going (without it, nothing would)."""
    cache = RUNTIME.owned_pods
    if cache is None:
        return
    wakeup.await_pods_gone(run.pods_awaited if run is not None else [],
                           lambda pod: cache.pod(namespace, pod) is not None)


def rest_after(took: float) -> float:
    """Seconds between a reconcile that took `took` seconds and the next one, however many
    events came: as long as it took, up to MAX_REST_SECONDS. A burst of pod events (1000 pods
    created or deleted) would otherwise run reconciles back to back, each reading every pod,
    and take a core from the API server and the controllers doing the work they watch (seen
    in `make bench`: 23 back-to-back reconciles of ~2 s in a scale-down of 1000 pods). At
    most half of the operator's time goes to one cluster's reconciles in a burst; a cluster
    of a few pods, whose reconcile takes a fraction of a second, waits that fraction."""
    return min(max(0.0, took), MAX_REST_SECONDS)


def next_wait(run) -> float:
    """Seconds until the next reconcile of a run that succeeded (a watch event may come sooner)."""
    if run is None:
        return RESYNC_SECONDS
    # A run that drained, resumed, downed or deleted Slurm nodes wrote a status read before it
    # did (a scale-down's last records, for one: Ready waits for them); the next run reads the
    # result and reports it. No watch event would say so (change_filter.py).
    if run.again_soon or (run.slurm is not None and run.slurm.changed_nodes):
        return AGAIN_SOON_SECONDS
    return min(RESYNC_SECONDS, run.look_again_within or RESYNC_SECONDS)


def wait_after_failure(backoff: float, step: str | None) -> tuple[float, float]:
    """(seconds until the next try, the new backoff) after a failed reconcile: the backoff
    doubles from 2 s up to MAX_BACKOFF_SECONDS; a step waiting on an unwatched input is tried
    again within UNWATCHED_RETRY_SECONDS all the same."""
    backoff = min(MAX_BACKOFF_SECONDS, max(2.0, backoff * 2))
    return (min(backoff, UNWATCHED_RETRY_SECONDS) if step in UNWATCHED_INPUT_STEPS else backoff), backoff


# kopf's events that change nothing a reconcile reads (the operator's own status writes, a
# kubelet's heartbeat) wake nothing: change_filter.py.
CLUSTER_CHANGES = ChangeFilter(custom_resource_digest)
NODE_SET_CHANGES = ChangeFilter(custom_resource_digest)
KUBERNETES_NODE_CHANGES = ChangeFilter(kubernetes_node_digest)


@kopf.on.event(GROUP, VERSION, "slurmclusters")
def cluster_changed(namespace, name, body, type, **_):
    if CLUSTER_CHANGES.changed(type, body):
        RUNTIME.nudge(namespace, name)


@kopf.on.event(GROUP, VERSION, "nodesets")
def node_set_changed(namespace, spec, body, type, **_):
    if not NODE_SET_CHANGES.changed(type, body):
        return
    if type == "DELETED":
        RUNTIME.nudge(namespace, spec.get("clusterName"))
        return
    cluster = RUNTIME.api.get(ownership.SLURM_CLUSTER, namespace, spec.get("clusterName", ""))
    if cluster is not None:
        RUNTIME.nudge(namespace, cluster["metadata"]["name"])
        return
    # No cluster, no reconcile: say so on the NodeSet itself, and create nothing.
    report_cluster_not_found(RUNTIME.api, RUNTIME.events, dict(body))


@kopf.on.event("", "v1", "nodes")
def kubernetes_node_changed(body, type, **_):
    """A Kubernetes node's health decides Slurm drains: every cluster takes a look."""
    if not KUBERNETES_NODE_CHANGES.changed(type, body):
        return
    with RUNTIME.lock:
        for wakeup in RUNTIME.wakeups.values():
            wakeup.set()


def owned_object_changed(event_type: str, obj: dict) -> None:
    """One of our pods or applied objects appeared, changed or went: its cluster looks at once
    (a pod's state is what Slurm's node follows; an edited or deleted object is drift)."""
    meta = obj["metadata"]
    RUNTIME.nudge(meta.get("namespace"), (meta.get("labels") or {}).get(ownership.CLUSTER))


def owned_pod_changed(event_type: str, pod: dict) -> None:
    """One of our pods: as any owned object; its going may be the one a scale-down waits for."""
    owned_object_changed(event_type, pod)
    if event_type == "DELETED":
        meta = pod["metadata"]
        cluster = (meta.get("labels") or {}).get(ownership.CLUSTER)
        if meta.get("namespace") and cluster:
            RUNTIME.wakeup(meta["namespace"], cluster).pod_gone(meta["name"])


def other_scheduler_pod_changed(event_type: str, pod: dict) -> None:
    """A pod Slurm schedules (spec.bridge) appeared, changed or went: its cluster looks at once.
    Pods of other schedulers than kubeslurm's pass the API server's filter too: passed over here.
    Whether the pod's namespace is bridged is decided by the reconcile, which reads the mapping."""
    scheduler = (pod.get("spec") or {}).get("schedulerName") or ""
    if not scheduler.startswith(SCHEDULER_PREFIX):
        return
    cluster = scheduler[len(SCHEDULER_PREFIX):]
    RUNTIME.saw_bridged_pod(cluster, pod["metadata"]["namespace"])
    RUNTIME.nudge_named(cluster)


def watch_handlers() -> dict[WatchSelection, WatchHandler]:
    """What each filtered watch (filtered_watch.py) hands its events to: every one wakes a cluster."""
    return {OWNED_PODS: owned_pod_changed, OTHER_SCHEDULERS_PODS: other_scheduler_pod_changed,
            **{selection: owned_object_changed for selection in OWNED_OBJECTS}}


@kopf.on.cleanup()
def stop_watches(**_):
    RUNTIME.stop_watches()
