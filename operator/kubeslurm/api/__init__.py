"""The kubeslurm.io/v1alpha1 API: SlurmCluster and NodeSet."""

from .manifests import ManifestError, Manifests, load_documents, load_files, parse_object
from .node_set import NodeSetSpec, NodeSetStatus
from .resources import API_VERSION, GROUP, VERSION, NodeSet, SlurmCluster
from .slurm_cluster import SlurmClusterSpec, SlurmClusterStatus

__all__ = [
    "API_VERSION", "GROUP", "VERSION", "ManifestError", "Manifests", "NodeSet", "NodeSetSpec",
    "NodeSetStatus", "SlurmCluster", "SlurmClusterSpec", "SlurmClusterStatus", "load_documents",
    "load_files", "parse_object",
]
