"""The NodeSet kind: a StatefulSet of identical slurmd pods, one Slurm node each."""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from .base import KubeModel, SubfieldError, preserve_unknown
from .bridge import BRIDGED_FEATURE, BRIDGED_FEATURE_IS_THE_OPERATORS
from .conditions import CONDITIONS_LIST, Condition
from .names import DNS_LABEL_PATTERN, FEATURE_PATTERN
from .pod_template import ALLOWED_SUMMARY, LabelKey, LabelValue, PodTemplate
from .quantity import QUANTITY_PATTERN, to_mebibytes, to_whole_cpus
from .slurm_cluster import MAX_LOGIN_REPLICAS

# Slurm keeps a node's CPU count in 16 bits; memory beyond an exbibyte is a typo.
MAX_CPUS = 65535
MAX_MEMORY_MIB = 2**40


class NodeResources(KubeModel):
    cpu: int | Annotated[str, Field(max_length=5, pattern=r"^[0-9]+$")] = Field(
        default="1",
        description="Whole CPUs per pod; the pod requests and limits this, and slurmd registers CPUs=N.",
    )
    memory: int | Annotated[str, Field(max_length=32, pattern=QUANTITY_PATTERN)] = Field(
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
        if to_whole_cpus(self.cpu) > MAX_CPUS:
            raise SubfieldError("cpu", f"{self.cpu!r} is more than {MAX_CPUS} CPUs, the most a Slurm node registers")
        if to_mebibytes(self.memory) < 256:
            raise ValueError(f"memory {self.memory!r} is below 256Mi, too small for slurmd and a job")
        if to_mebibytes(self.memory) > MAX_MEMORY_MIB:
            raise SubfieldError("memory", f"{self.memory!r} is more than 1Ei")
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
        max_length=317,
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


# The operator names a cluster's own objects and pods `<cluster>-<suffix>` (render/k8s/naming.py;
# a unit test keeps this list in step with it). A NodeSet is a StatefulSet and a Service of
# its own name with pods `<nodeset>-<ordinal>`, so it may be none of these names, nor a
# name whose pods would be (`<cluster>-slurmctld` makes pods named like the slurmctld Services).
CLUSTER_OBJECT_SUFFIXES = (
    "controller", "accounting", "mariadb", "login", "controller-state", "slurmctld", "slurmdbd", "database", "slurm-config", "auth-key", "slurmdbd-config",
    "mariadb-password", "home", "ssh", "ssh-host-keys", "sssd", "unix-users",
)
CLUSTER_POD_SUFFIXES = (
    "controller-0", "controller-1", "slurmctld-0", "slurmctld-1", "accounting-0", "mariadb-0",
    *(f"login-{ordinal}" for ordinal in range(MAX_LOGIN_REPLICAS)),
)
RESERVED_NODE_SET_SUFFIXES = CLUSTER_OBJECT_SUFFIXES + CLUSTER_POD_SUFFIXES


_GPU_CEL = "(has(self.gpus) && has(self.gpus.resourceName) ? self.gpus.resourceName : 'nvidia.com/gpu')"
_HAS_POD_SPEC = "has(self.podTemplate) && has(self.podTemplate.spec)"
# The CRD's form of NodeSetSpec._pod_template_keeps_to_its_own.
POD_TEMPLATE_RULES = [
    {
        "rule": f"!({_HAS_POD_SPEC} && has(self.podTemplate.spec.containers)) || self.podTemplate.spec.containers.all(c, "
        f"!has(c.resources) || ((!has(c.resources.requests) || !({_GPU_CEL} in c.resources.requests)) && "
        f"(!has(c.resources.limits) || !({_GPU_CEL} in c.resources.limits))))",
        "message": "podTemplate.spec.containers[].resources must not name the GPU resource: GPUs come from spec.gpus",
    },
]


class NodeSetSpec(KubeModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
                {"rule": "!has(self.replaceUnhealthy) || !self.replaceUnhealthy || !has(self.updateStrategy) "
                         "|| !has(self.updateStrategy.type) || self.updateStrategy.type == 'OnDelete'",
                 "message": "replaceUnhealthy needs updateStrategy OnDelete"},
                {"rule": f"!has(self.features) || !('{BRIDGED_FEATURE}' in self.features)",
                 "message": BRIDGED_FEATURE_IS_THE_OPERATORS},
                *POD_TEMPLATE_RULES,
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
    bridged: bool = Field(
        default=False,
        description=(
            "Run these slurmd pods on the Kubernetes nodes dedicated to the SlurmCluster's bridge, where Slurm "
            "schedules both batch jobs and Slurm-scheduled pods (spec.bridge), so no GPU is handed out twice. "
            "The admin dedicates a node with `kubectl label node N kubeslurm.io/bridge=<cluster>` and "
            "`kubectl taint node N kubeslurm.io/bridge=<cluster>:NoSchedule`; the pods then select and tolerate "
            "that, request only slurmd's own CPU and memory (Slurm allocates the rest, with the limits at "
            "spec.resources and the GPUs), and register the Slurm feature kubeslurm_bridged, which bridged "
            "pods' jobs ask for. Needs spec.bridge.enabled on the SlurmCluster; the operator never changes Nodes."
        ),
    )
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64, description="Kubernetes nodeSelector of the slurmd pods.")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        description="Kubernetes tolerations of the slurmd pods.",
    )
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=preserve_unknown("Kubernetes affinity of the slurmd pods."))
    pod_template: PodTemplate | None = Field(
        default=None,
        description=(
            "A partial pod template merged over the operator's slurmd pod (maps key by key; containers, volumes, "
            "env and volumeMounts item by item on their name or mountPath). Only what cannot give a job or a "
            "researcher more than slurmd has: " + ALLOWED_SUMMARY + ". Refused: more containers or init containers, "
            "securityContext/privileged, hostNetwork/hostPID/hostIPC, serviceAccountName, hostPath and other volume "
            "types, a volume or env var of any cluster's key or password Secret (*-auth-key, *-mariadb-password, "
            "*-slurmdbd-config), mounts at, under or above the paths slurmd uses, the operator's volume and env names, "
            "labels and annotations under kubeslurm.io/, and nulls (they would delete the operator's settings)."
        ),
    )
    update_strategy: UpdateStrategy = Field(default_factory=UpdateStrategy, description="How slurmd pods pick up a new image or pod template.")
    replace_unhealthy: bool = Field(
        default=False,
        description=(
            "Replace a node drained for its health (the health check, a drainOnNodeConditions condition, a Kubernetes "
            "node's drain-reason annotation, a cordon) once no job runs on it: its pod is deleted and comes back under "
            "the same Slurm name, kept off a troubled Kubernetes node while the trouble lasts. Needs updateStrategy OnDelete."
        ),
    )

    @model_validator(mode="after")
    def _cross_field(self):
        if self.replicas > self.max_replicas:
            raise ValueError(f"replicas ({self.replicas}) must not exceed maxReplicas ({self.max_replicas})")
        if self.replace_unhealthy and self.update_strategy.type != "OnDelete":
            raise SubfieldError(
                "replaceUnhealthy",
                "needs updateStrategy OnDelete: keeping pods off a troubled Kubernetes node changes the pod template, and "
                "RollingUpdate would restart every slurmd pod, with its jobs, each time",
            )
        if BRIDGED_FEATURE in self.features:
            raise SubfieldError(f"features[{self.features.index(BRIDGED_FEATURE)}]", BRIDGED_FEATURE_IS_THE_OPERATORS)
        self._pod_template_keeps_to_its_own()
        return self

    def gpu_resource_name(self) -> str:
        return self.gpus.resource_name if self.gpus else GPUs.model_fields["resource_name"].default

    def _pod_template_keeps_to_its_own(self) -> None:
        """The podTemplate check that needs the NodeSet's GPU resource (the rest are in pod_template.py)."""
        spec = self.pod_template.spec if self.pod_template else None
        if spec is None:
            return
        gpu = self.gpu_resource_name()
        for index, container in enumerate(spec.containers or []):
            path = f"podTemplate.spec.containers[{index}]"
            resources = container.resources
            for field, quantities in (("requests", resources and resources.requests), ("limits", resources and resources.limits)):
                if quantities and gpu in quantities:
                    raise SubfieldError(
                        f"{path}.resources.{field}.{gpu}",
                        "GPUs come from spec.gpus (slurmd registers them as gres/gpu): set spec.gpus.count",
                    )


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
