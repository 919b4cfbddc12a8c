"""The two custom resources as whole objects (apiVersion, kind, metadata, spec, status)."""

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from .node_set import NodeSetSpec, NodeSetStatus
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


KINDS = {"SlurmCluster": SlurmCluster, "NodeSet": NodeSet}
STATUS_MODELS = {"SlurmCluster": SlurmClusterStatus, "NodeSet": NodeSetStatus}
