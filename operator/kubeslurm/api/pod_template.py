"""NodeSet spec.podTemplate: the part of the slurmd pod an admin may change, and nothing else.

slurmd runs as root and holds the cluster's auth key: whoever controls its pod can
forge any Slurm user. So podTemplate is not a free pod template. It may change:

- metadata: labels and annotations (the operator's own labels always win);
- spec: nodeSelector, tolerations, affinity, topologySpreadConstraints, priorityClassName;
- spec.volumes: extra data volumes (emptyDir, persistentVolumeClaim, nfs, configMap,
  secret, ephemeral) under names the operator does not use;
- spec.containers: only the container named `slurmd`, and in it only image,
  imagePullPolicy, extra env, extra resources and volumeMounts of those volumes.

Everything else is refused, each with the field named: more containers or init
containers (they would run beside slurmd with its volumes), host namespaces, privileged
or other securityContext, serviceAccountName, hostPath volumes, a volume or env var of
any cluster's key or password Secrets, mounts over the paths slurmd needs,
and cpu/memory/GPU resources (they come from spec.resources and spec.gpus, which slurmd
registers). Null values are refused too: in the merge a null deletes the operator's field.

The check that needs the NodeSet's GPU resource lives on NodeSetSpec (node_set.py);
the rest are here. Each is also a CRD rule, so `kubectl apply` refuses the
same; fields not declared here are unknown to the CRD schema, which kubectl refuses too.
"""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from .base import KubeModel, SubfieldError, preserve_unknown
from .names import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    ENV_NAME_PATTERN,
    HOST_PATTERN,
    IMAGE_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_DNS_SUBDOMAIN,
    MAX_IMAGE,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MOUNT_PATH_PATTERN,
    RELATIVE_PATH_PATTERN,
    RESOURCE_NAME_PATTERN,
    SECRET_KEY_PATTERN,
)
from .mount_paths import mount_path_problem as mount_path_problem_among
from .mount_paths import mount_path_rule
from .quantity import QUANTITY_PATTERN

SLURMD_CONTAINER = "slurmd"

# What the slurmd pod mounts (render/slurmd/statefulset.py, render/slurm_pod.py; a unit
# test keeps these lists in step with the rendered pod). A mount at, under or above one of
# them would hide the key, the config, the spool or the users that slurmd relies on.
RESERVED_MOUNT_PATHS = (
    "/etc/slurm", "/etc/slurm-key", "/etc/slurm-config", "/run/slurm", "/var/spool/slurmd",
    "/dev/shm", "/etc/passwd", "/etc/group", "/etc/kubeslurm-users", "/home", "/proc", "/sys",
    "/etc/kubeslurm-health", "/etc/kubeslurm-unix-users",
)
RESERVED_VOLUME_NAMES = ("slurm-etc", "slurm-key", "slurm-config", "spool", "slurm-run", "shm", "unix-users", "unix-users-table", "home",
                         "health-site-check")
# The pod volumes of the SlurmCluster's spec.storage.volumes are shared-<name>.
RESERVED_VOLUME_PREFIX = "shared-"
_VOLUME_NAME_REFUSAL = (
    f"the operator's slurmd pod uses the volume names {', '.join(RESERVED_VOLUME_NAMES)} and {RESERVED_VOLUME_PREFIX}* "
    "(the cluster's spec.storage.volumes): choose another"
)
# POD_NAME is slurmd's node name; SLURM*-variables change where slurmd and scontrol read their config.
RESERVED_ENV_NAMES = ("POD_NAME",)
RESERVED_ENV_PREFIX = "SLURM"
# Slurm registers what slurmd is given: these come from spec.resources (and spec.gpus).
RESERVED_RESOURCES = ("cpu", "memory")

ALLOWED_SUMMARY = (
    "a podTemplate may set only metadata.labels and metadata.annotations; spec.nodeSelector, tolerations, affinity, "
    "topologySpreadConstraints, priorityClassName; spec.volumes (emptyDir, persistentVolumeClaim, nfs, configMap, "
    "secret, ephemeral); and in spec.containers only the container named slurmd with image, imagePullPolicy, env, "
    "resources (not cpu, memory or GPUs: see spec.resources and spec.gpus) and volumeMounts"
)

# Why the most tempting refused fields are refused; the rest get ALLOWED_SUMMARY alone.
REFUSED_BECAUSE = {
    "securityContext": "slurmd's security context is the operator's, who runs it as root to start jobs as their users",
    "hostNetwork": "host namespaces give the pod the node's network, processes or IPC",
    "hostPID": "host namespaces give the pod the node's network, processes or IPC",
    "hostIPC": "host namespaces give the pod the node's network, processes or IPC",
    "serviceAccountName": "slurmd pods have no Kubernetes API access",
    "serviceAccount": "slurmd pods have no Kubernetes API access",
    "automountServiceAccountToken": "slurmd pods have no Kubernetes API access",
    "initContainers": "only the operator's init container runs before slurmd",
    "ephemeralContainers": "only slurmd runs in the pod",
    "hostPath": "a host path gives jobs the Kubernetes node's files",
    "command": "the operator starts slurmd with the arguments Slurm needs",
    "args": "the operator starts slurmd with the arguments Slurm needs",
    "mountPropagation": "mount propagation reaches the host's mounts",
}


def refused_field_message(field: str) -> str:
    """The error for a field a podTemplate may not set: why (when known), then what is allowed."""
    reason = REFUSED_BECAUSE.get(field)
    return f"not allowed in a podTemplate: {reason}; {ALLOWED_SUMMARY}" if reason else f"not allowed in a podTemplate; {ALLOWED_SUMMARY}"


def _no_nulls(data: Any) -> Any:
    """A null would delete the operator's field in the merge: refuse it where it is written."""
    if isinstance(data, dict):
        for key, value in data.items():
            if value is None:
                raise SubfieldError(str(key), "null is not allowed in a podTemplate: it would delete the operator's setting")
    return data


class PodTemplatePart(KubeModel):
    """Every part of podTemplate: unknown fields refused (see manifests.format_validation_error), no nulls."""

    _refuse_nulls = model_validator(mode="before")(_no_nulls)


LabelKey = Annotated[str, Field(max_length=MAX_LABEL_KEY, pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE, pattern=LABEL_VALUE_PATTERN)]
# A string only (write "1", not 1): an int-or-string would need a CEL rule per value, which
# the API server refuses here as too costly.
Quantity = Annotated[str, Field(max_length=64, pattern=QUANTITY_PATTERN)]
ResourceName = Annotated[str, Field(max_length=MAX_LABEL_KEY, pattern=RESOURCE_NAME_PATTERN)]
# Secrets, ConfigMaps, claims: object names that Kubernetes checks as DNS subdomains.
ObjectName = Annotated[str, Field(min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN)]
RelativePath = Annotated[str, Field(max_length=1024, pattern=RELATIVE_PATH_PATTERN)]

# Every kubeslurm cluster keeps its auth key, database password and slurmdbd.conf in Secrets
# named `<cluster>-<suffix>` (render/k8s/naming.py). A slurmd pod may read none of them, not even
# another cluster's: whoever reads a key can forge any user of that cluster, and a
# podTemplate may make a mounted Secret readable by every job (defaultMode).
CLUSTER_SECRET_SUFFIXES = ("-auth-key", "-mariadb-password", "-slurmdbd-config", "-ssh-host-keys", "-sssd")
_CLUSTER_SECRET_MESSAGE = (
    "Secrets named *-auth-key, *-mariadb-password, *-slurmdbd-config, *-ssh-host-keys or *-sssd are a kubeslurm cluster's keys and passwords: "
    "a slurmd pod gets only what the operator mounts"
)
_NOT_A_CLUSTER_SECRET = {
    "x-kubernetes-validations": [
        {"rule": " && ".join(f"!self.endsWith('{suffix}')" for suffix in CLUSTER_SECRET_SUFFIXES), "message": _CLUSTER_SECRET_MESSAGE}
    ]
}


def _not_a_cluster_secret(name: str) -> str:
    if name.endswith(CLUSTER_SECRET_SUFFIXES):
        raise ValueError(f"{name}: {_CLUSTER_SECRET_MESSAGE}")
    return name


UserSecretName = Annotated[ObjectName, Field(json_schema_extra=_NOT_A_CLUSTER_SECRET), AfterValidator(_not_a_cluster_secret)]

# The operator's labels and annotations (the running-jobs label that the disruption budget
# counts, the config hash) are under kubeslurm.io/: a template must not preset them.
RESERVED_METADATA_PREFIX = "kubeslurm.io/"
_NOT_RESERVED_KEY = {
    "x-kubernetes-validations": [
        {"rule": f"self.all(k, !k.startsWith('{RESERVED_METADATA_PREFIX}'))",
         "message": f"keys under {RESERVED_METADATA_PREFIX} are the operator's"}
    ]
}


def _no_reserved_keys(values: dict[str, str] | None) -> dict[str, str] | None:
    for key in values or {}:
        if key.startswith(RESERVED_METADATA_PREFIX):
            raise SubfieldError(key, f"keys under {RESERVED_METADATA_PREFIX} are the operator's (it sets them on the pods itself)")
    return values


class PodTemplateMetadata(PodTemplatePart):
    labels: dict[LabelKey, LabelValue] | None = Field(
        default=None, max_length=64, description="Extra pod labels (not under kubeslurm.io/).", json_schema_extra=_NOT_RESERVED_KEY
    )
    annotations: dict[LabelKey, Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=64, description="Extra pod annotations (not under kubeslurm.io/).", json_schema_extra=_NOT_RESERVED_KEY
    )

    _keys_are_ours = field_validator("labels", "annotations")(_no_reserved_keys)


class KeyToPath(PodTemplatePart):
    key: str = Field(max_length=MAX_DNS_SUBDOMAIN, pattern=SECRET_KEY_PATTERN)
    path: RelativePath
    mode: int | None = Field(default=None, ge=0, le=0o777)


class SecretVolumeSource(PodTemplatePart):
    secret_name: UserSecretName = Field(description="Not a cluster's key or password Secret (*-auth-key, *-mariadb-password, *-slurmdbd-config).")
    items: list[KeyToPath] | None = Field(default=None, max_length=64)
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None


class ConfigMapVolumeSource(PodTemplatePart):
    name: ObjectName
    items: list[KeyToPath] | None = Field(default=None, max_length=64)
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None


class EmptyDirVolumeSource(PodTemplatePart):
    medium: Literal["", "Memory"] | None = None
    size_limit: Quantity | None = None


class PersistentVolumeClaimVolumeSource(PodTemplatePart):
    claim_name: ObjectName
    read_only: bool | None = None


class NFSVolumeSource(PodTemplatePart):
    server: str = Field(max_length=MAX_DNS_SUBDOMAIN, pattern=HOST_PATTERN, description="NFS server host name or address.")
    path: str = Field(max_length=1024, pattern=MOUNT_PATH_PATTERN, description="Exported path.")
    read_only: bool | None = None


VOLUME_SOURCES = ("emptyDir", "persistentVolumeClaim", "nfs", "configMap", "secret", "ephemeral")
_ONE_SOURCE_RULE = " + ".join(f"(has(self.{source}) ? 1 : 0)" for source in VOLUME_SOURCES) + " == 1"


class Volume(PodTemplatePart):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": _ONE_SOURCE_RULE, "message": f"a podTemplate volume has exactly one of {', '.join(VOLUME_SOURCES)}"}
            ]
        }
    )

    name: str = Field(
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description=f"Not one of the operator's volume names ({', '.join(RESERVED_VOLUME_NAMES)}, {RESERVED_VOLUME_PREFIX}*).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!(self in {list(RESERVED_VOLUME_NAMES)}) && !self.startsWith('{RESERVED_VOLUME_PREFIX}')",
                    "message": _VOLUME_NAME_REFUSAL,
                }
            ]
        },
    )
    empty_dir: EmptyDirVolumeSource | None = None
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    nfs: NFSVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    ephemeral: dict[str, Any] | None = Field(
        default=None, json_schema_extra=preserve_unknown("A generic ephemeral volume (volumeClaimTemplate).")
    )

    @field_validator("name")
    @classmethod
    def _not_ours(cls, name: str) -> str:
        if name in RESERVED_VOLUME_NAMES or name.startswith(RESERVED_VOLUME_PREFIX):
            raise ValueError(_VOLUME_NAME_REFUSAL)
        return name

    @model_validator(mode="after")
    def _one_source(self):
        given = [source for source in VOLUME_SOURCES if getattr(self, _snake(source)) is not None]
        if len(given) != 1:
            raise ValueError(f"a podTemplate volume has exactly one of {', '.join(VOLUME_SOURCES)}, found {given or 'none'}")
        return self


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def mount_path_problem(path: str) -> str | None:
    """Why a podTemplate mount path would hide what slurmd needs, or None."""
    return mount_path_problem_among(path, RESERVED_MOUNT_PATHS, "the operator mounts for slurmd")


_MOUNT_PATH_RULE = mount_path_rule(RESERVED_MOUNT_PATHS)


class VolumeMount(PodTemplatePart):
    name: str = Field(max_length=63, pattern=DNS_LABEL_PATTERN, description="A volume of spec.volumes.")
    mount_path: str = Field(
        max_length=1024,
        pattern=MOUNT_PATH_PATTERN,
        description=f"An absolute path, not at, under or above {', '.join(RESERVED_MOUNT_PATHS)}.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": _MOUNT_PATH_RULE,
                    "message": f"mountPath must not be at, under or above {', '.join(RESERVED_MOUNT_PATHS)}: the operator mounts those for slurmd",
                }
            ]
        },
    )
    read_only: bool | None = None
    sub_path: RelativePath | None = None

    @field_validator("mount_path")
    @classmethod
    def _not_over_ours(cls, path: str) -> str:
        problem = mount_path_problem(path)
        if problem:
            raise ValueError(problem)
        return path


class SecretKeySelector(PodTemplatePart):
    name: UserSecretName = Field(description="Not a cluster's key or password Secret (*-auth-key, *-mariadb-password, *-slurmdbd-config).")
    key: str = Field(max_length=MAX_DNS_SUBDOMAIN, pattern=SECRET_KEY_PATTERN)
    optional: bool | None = None


class ConfigMapKeySelector(PodTemplatePart):
    name: ObjectName
    key: str = Field(max_length=MAX_DNS_SUBDOMAIN, pattern=SECRET_KEY_PATTERN)
    optional: bool | None = None


class EnvVarSource(PodTemplatePart):
    field_ref: dict[str, Any] | None = Field(default=None, json_schema_extra=preserve_unknown("A field of the pod (fieldPath)."))
    resource_field_ref: dict[str, Any] | None = Field(default=None, json_schema_extra=preserve_unknown("A resource of the container."))
    config_map_key_ref: ConfigMapKeySelector | None = None
    secret_key_ref: SecretKeySelector | None = None


_ENV_NAME_RULE = f"!(self in {list(RESERVED_ENV_NAMES)}) && !self.startsWith('{RESERVED_ENV_PREFIX}')"
_ENV_NAME_MESSAGE = (
    f"env names {', '.join(RESERVED_ENV_NAMES)} and {RESERVED_ENV_PREFIX}* are the operator's "
    "(slurmd's node name and where Slurm reads its config)"
)


class EnvVar(PodTemplatePart):
    name: str = Field(
        max_length=256,
        pattern=ENV_NAME_PATTERN,
        json_schema_extra={"x-kubernetes-validations": [{"rule": _ENV_NAME_RULE, "message": _ENV_NAME_MESSAGE}]},
    )
    value: str | None = Field(default=None, max_length=32768)
    value_from: EnvVarSource | None = None

    @field_validator("name")
    @classmethod
    def _not_ours(cls, name: str) -> str:
        if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(_ENV_NAME_MESSAGE)
        return name


_NO_RESERVED_RESOURCE = {
    "rule": " && ".join(f"!('{name}' in self)" for name in RESERVED_RESOURCES),
    "message": "cpu and memory come from spec.resources (slurmd registers them): set them there",
}


def _resource_map(description: str):
    return Field(
        default=None,
        max_length=16,
        description=description,
        json_schema_extra={"x-kubernetes-validations": [_NO_RESERVED_RESOURCE]},
    )


class ResourceRequirements(PodTemplatePart):
    requests: dict[ResourceName, Quantity] | None = _resource_map("Extra resource requests, e.g. ephemeral-storage, hugepages-2Mi, example.com/rdma.")
    limits: dict[ResourceName, Quantity] | None = _resource_map("Extra resource limits.")

    @model_validator(mode="after")
    def _not_registered_ones(self):
        for field, quantities in (("requests", self.requests), ("limits", self.limits)):
            for name in quantities or {}:
                if name in RESERVED_RESOURCES:
                    raise SubfieldError(f"{field}.{name}", "cpu and memory come from spec.resources (slurmd registers them): set them there")
        return self


class SlurmdContainer(PodTemplatePart):
    name: str = Field(
        max_length=63,
        description="Must be slurmd: the only container a podTemplate may change; extra containers are not allowed.",
        json_schema_extra={"enum": [SLURMD_CONTAINER]},
    )
    image: str | None = Field(default=None, max_length=MAX_IMAGE, pattern=IMAGE_PATTERN, description="Another Slurm image for these nodes (same contract as spec.slurm.image).")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    env: list[EnvVar] | None = Field(default=None, max_length=64, description="Extra environment variables.")
    resources: ResourceRequirements | None = Field(default=None, description="Extra resources; cpu, memory and GPUs come from spec.resources and spec.gpus.")
    volume_mounts: list[VolumeMount] | None = Field(default=None, max_length=32, description="Mounts of spec.volumes.")

    @field_validator("name")
    @classmethod
    def _only_slurmd(cls, name: str) -> str:
        if name != SLURMD_CONTAINER:
            raise ValueError(
                f"container {name!r} is not allowed: a podTemplate may change only the container named slurmd "
                "(an extra container would run beside slurmd with its volumes and the cluster's auth key)"
            )
        return name


class PodSpecOverlay(PodTemplatePart):
    node_selector: dict[LabelKey, LabelValue] | None = Field(default=None, max_length=64)
    tolerations: list[dict[str, Any]] | None = Field(
        default=None, max_length=64, json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    )
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=preserve_unknown("Kubernetes affinity."))
    topology_spread_constraints: list[dict[str, Any]] | None = Field(
        default=None, max_length=16, json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    )
    priority_class_name: str | None = Field(default=None, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN)
    volumes: list[Volume] | None = Field(default=None, max_length=32, description="Extra data volumes (no hostPath).")
    # maxItems only in the schema: in Python the name check below says why a second container is refused.
    containers: list[SlurmdContainer] | None = Field(
        default=None, description="Only the slurmd container.", json_schema_extra={"maxItems": 1}
    )

    @field_validator("containers")
    @classmethod
    def _one_slurmd(cls, containers: list[SlurmdContainer] | None):
        if containers is not None and len(containers) > 1:
            raise SubfieldError("[1]", "list slurmd once: a podTemplate changes only the container named slurmd")
        return containers


class PodTemplate(PodTemplatePart):
    metadata: PodTemplateMetadata | None = None
    spec: PodSpecOverlay | None = None

    def overlay(self) -> dict:
        """The fields as written, for the merge over the operator's template."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, mode="json")
