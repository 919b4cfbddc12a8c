"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, and
kube-scheduler on request) from pinned upstream binaries: the real-API-server tier runs
the operator against it, and the local cluster is built on it."""

from testbed.control_plane.binaries import (  # noqa: F401
    BinaryBuildError,
    build_kubernetes_binaries,
    pinned_kubernetes_version,
)
from testbed.control_plane.control_plane import (  # noqa: F401
    STATE_DIR,
    ControlPlane,
    ControlPlaneError,
    cleanup_leftovers,
)
