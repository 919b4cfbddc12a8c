"""The two custom resources as whole objects (apiVersion, kind, metadata, spec, status)."""

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .node_set import RESERVED_SUFFIXES, NodeSetSpec, NodeSetStatus
from .slurm_cluster import SlurmClusterSpec, SlurmClusterStatus

GROUP = "kubeslurm.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class ObjectMeta(BaseModel):
    """The part of metav1.ObjectMeta kubeslurm reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    namespace: str = "default"
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
    for suffix in RESERVED_SUFFIXES:
        if node_set.metadata.name == f"{node_set.spec.cluster_name}-{suffix}":
            raise ValueError(
                f"metadata.name {node_set.metadata.name!r} is taken by the cluster's own {suffix} objects; choose another name"
            )
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
