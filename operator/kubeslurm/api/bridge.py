"""spec.bridge of a SlurmCluster: Kubernetes pods that Slurm schedules (docs/design/slurm-scheduled-pods.md).

A pod opts in with `schedulerName: kubeslurm-<cluster>`; which Slurm account, user, QOS and
partition its placeholder job uses is decided here, by the cluster admin, per namespace, and
never by the pod: whoever can create pods in a namespace gets exactly that namespace's mapping.
Off by default: a cluster without `bridge.enabled` renders and runs as before.
"""

from pydantic import ConfigDict, Field, model_validator

from .base import KubeModel
from .names import MAX_NAMESPACE, NAMESPACE_PATTERN, SLURM_NAME_PATTERN, UNIX_USER_PATTERN

MAX_BRIDGED_NAMESPACES = 64
# slurm.conf's Epilog when the bridge is on (images/slurm/bridge-epilog.sh): it keeps a placeholder
# job COMPLETING, its node closed to new allocations, until the operator says the pod is gone.
BRIDGE_EPILOG = "/usr/local/sbin/kubeslurm-bridge-epilog"
# The Slurm node feature of a bridged NodeSet's nodes (NodeSet spec.bridged): the operator adds it,
# and a bridged pod's placeholder job asks for it, so such pods land only on the Kubernetes nodes
# dedicated to the bridge. A user setting it in spec.features would let other nodes take them.
BRIDGED_FEATURE = "kubeslurm_bridged"
BRIDGED_FEATURE_IS_THE_OPERATORS = (
    f"features must not name {BRIDGED_FEATURE}: the operator gives it to the nodes of a NodeSet with "
    f"spec.bridged: true (set that instead), and bridged pods run only on nodes with it"
)
ENABLED_WITHOUT_NAMESPACES = "bridge.enabled needs at least one entry in bridge.namespaces: whose pods, charged to which account"


def scheduler_name(cluster_name: str) -> str:
    """The schedulerName a pod sets to be scheduled by Slurm on this cluster."""
    return f"kubeslurm-{cluster_name}"


class BridgedNamespace(KubeModel):
    namespace: str = Field(
        min_length=1, max_length=MAX_NAMESPACE, pattern=NAMESPACE_PATTERN,
        description="A Kubernetes namespace whose pods may ask this cluster's Slurm to schedule them.",
    )
    account: str = Field(
        max_length=40, pattern=SLURM_NAME_PATTERN,
        description="The Slurm account the namespace's placeholder jobs charge: one of spec.accounts.",
    )
    user: str = Field(
        max_length=32, pattern=UNIX_USER_PATTERN,
        description="The Unix user the placeholder jobs run as: one of the account's users. "
                    "A service user, not a researcher: its jobs are the namespace's pods.",
    )
    qos: str | None = Field(
        default=None, max_length=40, pattern=SLURM_NAME_PATTERN,
        description="The QOS of the placeholder jobs (their priority and what they may preempt): one of the "
                    "account's qos. Unset: the account's default.",
    )
    partition: str | None = Field(
        default=None, max_length=40, pattern=SLURM_NAME_PATTERN,
        description="The partition of the placeholder jobs: one of spec.partitions. Unset: the default partition.",
    )


class BridgeSpec(KubeModel):
    enabled: bool = Field(
        default=False,
        description="Let Slurm schedule pods with schedulerName kubeslurm-<cluster> in the namespaces below. "
                    "Each such pod becomes a Slurm job (CPUs, memory, kubeslurm.io/gpu as Slurm GPUs) and is bound "
                    "to the node of its allocation once the job runs; its GPUs are exactly the ones Slurm allocated "
                    "(the kubeslurm device plugin, on bridged NodeSets' nodes). Pod groups are in development "
                    "(docs/design/slurm-scheduled-pods.md). "
                    "The Slurm image must carry the bridge's Epilog (kubeslurm's does).",
    )
    namespaces: list[BridgedNamespace] = Field(
        default_factory=list, max_length=MAX_BRIDGED_NAMESPACES,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["namespace"]},
        description="The namespaces whose pods Slurm schedules, each with the account, user, QOS and partition "
                    "of its placeholder jobs. A pod in any other namespace is never bridged.",
    )

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!has(self.enabled) || !self.enabled || (has(self.namespaces) && self.namespaces.size() > 0)",
         "message": ENABLED_WITHOUT_NAMESPACES},
    ]})

    @model_validator(mode="after")
    def _namespaces_when_enabled(self):
        if self.enabled and not self.namespaces:
            raise ValueError(ENABLED_WITHOUT_NAMESPACES)
        names = [n.namespace for n in self.namespaces]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"namespaces must not repeat (one mapping per namespace), repeated: {repeated}")
        return self
