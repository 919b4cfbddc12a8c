"""What kubeslurm owns and how it finds it, stated once for every layer.

The label keys that mark an object as ours and name its cluster, component and
NodeSet; the Kubernetes kinds the operator reads and writes (with their REST paths,
so one code path serves them all); which of them it lists to find drift and
leftovers, and which it watches to wake a cluster's reconcile. render labels with
these keys, reconcile lists and prunes by them, the kopf handlers watch them.
Imports nothing of kubeslurm: it is the bottom layer.
"""

from dataclasses import dataclass

# -- labels ---------------------------------------------------------------------------
NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "kubeslurm"
CLUSTER = "kubeslurm.io/cluster"
NODE_SET = "kubeslurm.io/nodeset"
# Set by the operator (not by the pod template) on slurmd pods whose Slurm node runs
# a job; the running-jobs PodDisruptionBudget protects exactly those pods.
RUNNING_JOBS = "kubeslurm.io/running-jobs"

CONTROLLER = "controller"
ACCOUNTING = "accounting"
DATABASE = "database"
LOGIN = "login"
SLURMD = "slurmd"
STORAGE = "storage"  # the shared file systems' claims (spec.storage)
BRIDGE = "bridge"  # spec.bridge's device plugin on bridged nodes
COMPONENTS = (CONTROLLER, ACCOUNTING, DATABASE, LOGIN, SLURMD, STORAGE, BRIDGE)


def cluster_selector(cluster: str, component: str | None = None) -> str:
    """The label selector of every object kubeslurm made for `cluster` (of one component)."""
    selector = f"{MANAGED_BY}={MANAGER},{CLUSTER}={cluster}"
    return f"{selector},{COMPONENT}={component}" if component else selector


# -- kinds ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def collection_path(self, namespace: str | None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, namespace: str | None, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"


CONFIG_MAP = Kind("v1", "ConfigMap", "configmaps")
SECRET = Kind("v1", "Secret", "secrets")
SERVICE = Kind("v1", "Service", "services")
POD = Kind("v1", "Pod", "pods")
PERSISTENT_VOLUME_CLAIM = Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims")
NODE = Kind("v1", "Node", "nodes", namespaced=False)
EVENT = Kind("v1", "Event", "events")
STATEFUL_SET = Kind("apps/v1", "StatefulSet", "statefulsets")
POD_DISRUPTION_BUDGET = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
NETWORK_POLICY = Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies")
# spec.bridge's device plugin (render/bridge/device_plugin.py): its DaemonSet and its access.
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
ROLE = Kind("rbac.authorization.k8s.io/v1", "Role", "roles")
ROLE_BINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings")
DAEMON_SET = Kind("apps/v1", "DaemonSet", "daemonsets")
SLURM_CLUSTER = Kind("kubeslurm.io/v1alpha1", "SlurmCluster", "slurmclusters")
NODE_SET_KIND = Kind("kubeslurm.io/v1alpha1", "NodeSet", "nodesets")

# What render creates for a cluster, each owned (ownerReference) by the SlurmCluster or a NodeSet.
OWNED_KINDS = (
    CONFIG_MAP, SECRET, SERVICE, PERSISTENT_VOLUME_CLAIM, STATEFUL_SET, POD_DISRUPTION_BUDGET, NETWORK_POLICY,
    SERVICE_ACCOUNT, ROLE, ROLE_BINDING, DAEMON_SET,
)
# The owned kinds listed by label to find drift and leftovers. Secrets are not listed:
# reading every Secret would need `list secrets` everywhere; ours have fixed names and
# are read one by one, and garbage collection removes them. Claims are never pruned
# either: they hold slurmctld's job state and accounting data, which only the deletion
# of the SlurmCluster may take away.
LISTED_KINDS = (CONFIG_MAP, SERVICE, STATEFUL_SET, POD_DISRUPTION_BUDGET, NETWORK_POLICY)
# Objects whose changes wake their cluster's reconcile (those labelled ours): what we apply. Our
# pods, whose state Slurm's nodes follow, wake it too. Each through a watch the API server
# filters (reconcile/filtered_watch.py).
WATCHED_KINDS = LISTED_KINDS

_BY_KIND = {
    k.kind: k
    for k in (
        CONFIG_MAP, SECRET, SERVICE, POD, PERSISTENT_VOLUME_CLAIM, NODE, EVENT, STATEFUL_SET,
        POD_DISRUPTION_BUDGET, NETWORK_POLICY, SERVICE_ACCOUNT, ROLE, ROLE_BINDING, DAEMON_SET, SLURM_CLUSTER,
        NODE_SET_KIND,
    )
}


def kind_named(kind: str | None) -> Kind:
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"kubeslurm does not manage kind {kind!r}") from None


def kind_of(obj: dict) -> Kind:
    return kind_named(obj.get("kind"))
