"""The two custom resources as whole objects (apiVersion, kind, metadata, spec, status)."""

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .names import DNS_LABEL_PATTERN, MAX_NAMESPACE, MAX_OBJECT_NAME, NAMESPACE_PATTERN, RESERVED_NODE_SET_NAMES
from .node_set import RESERVED_NODE_SET_SUFFIXES, NodeSetSpec, NodeSetStatus
from .slurm_cluster import SlurmClusterSpec, SlurmClusterStatus

GROUP = "kubeslurm.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class ObjectMeta(BaseModel):
    """The part of metav1.ObjectMeta kubeslurm reads; everything else is kept as is.

    name and namespace reach config files and pod names: offline render checks them as
    the CRD's rules (names.OBJECT_NAME_RULES) and the API server do."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: str = Field(
        min_length=1, max_length=MAX_OBJECT_NAME, pattern=DNS_LABEL_PATTERN,
        description="A DNS label: lower-case letters, digits and '-', starting with a letter.",
    )
    namespace: str = Field(default="default", min_length=1, max_length=MAX_NAMESPACE, pattern=NAMESPACE_PATTERN)
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class SlurmCluster(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    KIND: ClassVar[str] = "SlurmCluster"
    PLURAL: ClassVar[str] = "slurmclusters"
    SHORT_NAMES: ClassVar[list[str]] = ["slurm"]

    api_version: Literal["kubeslurm.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SlurmCluster"]
    metadata: ObjectMeta
    spec: SlurmClusterSpec = Field(default_factory=SlurmClusterSpec)
    status: dict[str, Any] | None = None


def _node_set_name_is_free(node_set: "NodeSet") -> "NodeSet":
    name = node_set.metadata.name
    for suffix in RESERVED_NODE_SET_SUFFIXES:
        if name == f"{node_set.spec.cluster_name}-{suffix}":
            raise ValueError(
                f"metadata.name {name!r} is taken by the cluster's own {suffix} objects (or its pods would be named "
                "like them); choose another name"
            )
    if name in RESERVED_NODE_SET_NAMES:
        raise ValueError(f"metadata.name {name!r} is reserved: Nodes=ALL in a partition means every node; choose another name")
    return node_set


class NodeSet(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    KIND: ClassVar[str] = "NodeSet"
    PLURAL: ClassVar[str] = "nodesets"
    SHORT_NAMES: ClassVar[list[str]] = []

    api_version: Literal["kubeslurm.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["NodeSet"]
    metadata: ObjectMeta
    spec: NodeSetSpec
    status: dict[str, Any] | None = None

    _name_is_free = model_validator(mode="after")(_node_set_name_is_free)


KINDS = {"SlurmCluster": SlurmCluster, "NodeSet": NodeSet}
STATUS_MODELS = {"SlurmCluster": SlurmClusterStatus, "NodeSet": NodeSetStatus}
