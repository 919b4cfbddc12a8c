"""The pinned upstream Kubernetes binaries (etcd, kube-apiserver, ..., kubectl), built from
the Go module proxy by testbed/kubernetes/build.sh at the version its go.mod pins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from testbed import REPO

BUILD_SCRIPT = REPO / "testbed" / "kubernetes" / "build.sh"
GO_MOD = REPO / "testbed" / "kubernetes" / "go.mod"

# What the real-API-server tier needs; the local cluster adds the node binaries.
DEFAULT_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")


class BinaryBuildError(RuntimeError):
    pass


def pinned_kubernetes_version() -> str:
    """The k8s.io/kubernetes version pinned in testbed/kubernetes/go.mod, e.g. 'v1.30.14'."""
    for line in GO_MOD.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes" and parts[1].startswith("v"):
            return parts[1]
    raise BinaryBuildError(f"no k8s.io/kubernetes requirement in {GO_MOD}")


def build_kubernetes_binaries(*names: str, stream_output: bool = True) -> Path:
    """Builds (or finds, when already built) the pinned binaries; returns their directory.

    A cold build takes many minutes on 2 cores; a warm call returns at once.
    KUBESLURM_K8S_BIN_DIR, when set, is used as is and nothing is built.
    """
    override = os.environ.get("KUBESLURM_K8S_BIN_DIR")
    if override:
        return Path(override)
    names = names or DEFAULT_BINARIES
    return run_build_script(BUILD_SCRIPT, *names, stream_output=stream_output, error=BinaryBuildError)


def run_build_script(script: Path, *args: str, stream_output: bool = True,
                     error: type[Exception] = BinaryBuildError) -> Path:
    """Runs one of the test bed's Go build scripts; returns the directory it prints last."""
    result = subprocess.run(
        ["bash", str(script), *args],
        stdout=subprocess.PIPE,
        stderr=None if stream_output else subprocess.PIPE,
        text=True,
    )
    if result.returncode != 0:
        raise error(
            f"{script} {' '.join(args)} failed with exit code {result.returncode}"
            + (f":\n{result.stderr[-4000:]}" if result.stderr else " (its output is above)")
        )
    return Path(result.stdout.strip().splitlines()[-1])
