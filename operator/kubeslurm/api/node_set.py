"""The NodeSet kind: a StatefulSet of identical slurmd pods, one Slurm node each."""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from .base import KubeModel, preserve_unknown
from .conditions import CONDITIONS_LIST, Condition
from .names import DNS_LABEL_PATTERN, FEATURE_PATTERN
from .quantity import QUANTITY_PATTERN, to_mebibytes, to_whole_cpus


class NodeResources(KubeModel):
    cpu: int | Annotated[str, Field(pattern=r"^[0-9]+$")] = Field(
        default="1",
        description="Whole CPUs per pod; the pod requests and limits this, and slurmd registers CPUs=N.",
    )
    memory: int | Annotated[str, Field(pattern=QUANTITY_PATTERN)] = Field(
        default="1Gi",
        description="Memory per pod (request = limit); slurmd registers RealMemory in MiB.",
    )

    @property
    def cpus(self) -> int:
        return to_whole_cpus(self.cpu)

    @property
    def memory_mib(self) -> int:
        return to_mebibytes(self.memory)

    @model_validator(mode="after")
    def _slurm_can_use_it(self):
        to_whole_cpus(self.cpu)
        if to_mebibytes(self.memory) < 256:
            raise ValueError(f"memory {self.memory!r} is below 256Mi, too small for slurmd and a job")
        return self


class GPUs(KubeModel):
    count: int = Field(ge=0, le=64, description="GPUs per pod, requested from Kubernetes and registered as gres/gpu.")
    type: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9_.-]*$",
        max_length=32,
        description="GPU type shown in Slurm (gres gpu:TYPE:N), e.g. h100; jobs may ask --gres=gpu:h100:2.",
    )
    resource_name: str = Field(
        default="nvidia.com/gpu",
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$",
        description="The Kubernetes extended resource that pins GPUs to the pod.",
    )
    auto_detect: Literal["off", "nvml", "nvidia"] = Field(
        default="off",
        description=(
            "How slurmd finds the device files. off: the pod sees its GPUs as /dev/nvidia0..count-1 "
            "(true for whole-node pods and kubeslurm's fake device plugin); nvml: ask NVML, right for real "
            "NVIDIA GPUs shared between pods."
        ),
    )


class UpdateStrategy(KubeModel):
    type: Literal["RollingUpdate", "OnDelete"] = Field(
        default="OnDelete",
        description="OnDelete (default) never restarts a slurmd pod under a running job; RollingUpdate does.",
    )


# The operator names a cluster's own StatefulSets and Services `<cluster>-<suffix>`;
# a NodeSet with such a name would collide with them.
RESERVED_SUFFIXES = ("controller", "accounting", "mariadb", "login")


class NodeSetSpec(KubeModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"}
            ]
        }
    )

    cluster_name: str = Field(min_length=1, max_length=40, pattern=DNS_LABEL_PATTERN, description="The SlurmCluster, in this namespace, these nodes join.")
    replicas: int = Field(default=1, ge=0, le=1024, description="Slurm nodes (pods). Scale with `kubectl scale nodeset NAME --replicas=N`.")
    max_replicas: int = Field(
        default=64,
        ge=1,
        le=1024,
        description="Upper bound of replicas; Slurm reserves this many node slots (MaxNodeCount, gres.conf) so scaling up needs no controller restart.",
    )
    resources: NodeResources = Field(default_factory=NodeResources, description="CPUs and memory of each slurmd pod (request = limit).")
    gpus: GPUs | None = Field(default=None, description="GPUs per pod; none when unset.")
    features: list[Annotated[str, Field(max_length=64, pattern=FEATURE_PATTERN)]] = Field(
        default_factory=list, max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"}, description="Slurm node features (sbatch --constraint).")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Kubernetes nodeSelector of the slurmd pods.")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        description="Kubernetes tolerations of the slurmd pods.",
    )
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=preserve_unknown("Kubernetes affinity of the slurmd pods."))
    pod_template: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra=preserve_unknown(
            "A partial pod template (metadata, spec) merged over the operator's: containers merge by name."
        ),
    )
    update_strategy: UpdateStrategy = Field(default_factory=UpdateStrategy, description="How slurmd pods pick up a new image or pod template.")

    @model_validator(mode="after")
    def _cross_field(self):
        if self.replicas > self.max_replicas:
            raise ValueError(f"replicas ({self.replicas}) must not exceed maxReplicas ({self.max_replicas})")
        return self


class NodeSetStatus(KubeModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=CONDITIONS_LIST)
    replicas: int | None = Field(default=None, description="Pods that exist.")
    ready_replicas: int | None = None
    selector: str | None = Field(default=None, description="Label selector of the pods, for the scale subresource.")
    idle_nodes: int | None = None
    allocated_nodes: int | None = Field(default=None, description="Nodes running at least one job (ALLOCATED or MIXED).")
    drained_nodes: int | None = None
    down_nodes: int | None = None
