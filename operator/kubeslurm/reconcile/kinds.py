"""REST paths of the kinds kubeslurm reads and writes, so one code path serves them all."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

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
SLURM_CLUSTER = Kind("kubeslurm.io/v1alpha1", "SlurmCluster", "slurmclusters")
NODE_SET = Kind("kubeslurm.io/v1alpha1", "NodeSet", "nodesets")

# The kinds the operator lists by label to find drift and leftovers. Secrets are
# not listed: reading every Secret would need `list secrets` everywhere; ours have
# fixed names and are read one by one, and garbage collection removes them.
# Claims are never pruned either: they hold slurmctld's job state and accounting
# data, which only the deletion of the SlurmCluster may take away.
LISTED_KINDS = (CONFIG_MAP, SERVICE, STATEFUL_SET, POD_DISRUPTION_BUDGET)

_BY_KIND = {
    k.kind: k
    for k in (
        CONFIG_MAP, SECRET, SERVICE, POD, PERSISTENT_VOLUME_CLAIM, NODE, EVENT, STATEFUL_SET,
        POD_DISRUPTION_BUDGET, SLURM_CLUSTER, NODE_SET,
    )
}


def kind_of(obj: dict) -> Kind:
    try:
        return _BY_KIND[obj["kind"]]
    except KeyError:
        raise ValueError(f"kubeslurm does not manage kind {obj.get('kind')!r}") from None
