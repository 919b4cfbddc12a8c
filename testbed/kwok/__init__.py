"""kwok (sigs.k8s.io/kwok) against the real API server of testbed/control_plane: Kubernetes
nodes that exist only as API objects, and pods on them that kwok turns Running and Ready
(and removes when deleted) without running anything. The scheduler, the StatefulSet
controller and the operator see a cluster of any size; benchmarks/scale_bench.py uses it.

kwok is built from the Go module proxy at the version testbed/kwok/go.mod pins (build.sh,
cached like the Kubernetes binaries); kwok.yaml says which lifecycle it plays.
"""

from __future__ import annotations

from pathlib import Path

from testbed import REPO
from testbed.control_plane.binaries import BinaryBuildError, run_build_script
from testbed.processes import Supervisor

BUILD_SCRIPT = REPO / "testbed" / "kwok" / "build.sh"
CONFIG = REPO / "testbed" / "kwok" / "kwok.yaml"
# kwok manages the nodes with this label, and only them.
NODE_LABEL = "kubeslurm.io/kwok"


def build_kwok(stream_output: bool = True) -> Path:
    """The directory holding the pinned kwok binary (built on first use, then cached)."""
    return run_build_script(BUILD_SCRIPT, stream_output=stream_output, error=BinaryBuildError)


def fake_node(name: str, cpu: str, memory: str, pods: int) -> dict:
    """A Node that kwok manages: schedulable, with this much room, and no kubelet behind it."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {NODE_LABEL: "true", "kubernetes.io/hostname": name},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def start_kwok(kubeconfig: Path, bin_dir: Path, supervisor: Supervisor, log: Path):
    """kwok managing the nodes labelled NODE_LABEL, recorded by (and stopped with) `supervisor`."""
    return supervisor.spawn(
        "kwok",
        [str(bin_dir / "kwok"), f"--kubeconfig={kubeconfig}", f"--config={CONFIG}",
         f"--manage-nodes-with-label-selector={NODE_LABEL}=true", "--server-address="],
        marker=str(kubeconfig), log=log,
    )
