"""The pinned helm (testbed/helm/build.sh): the one way the helm tests, the e2e suite
and `make demo` find a helm binary."""

from __future__ import annotations

import os
from pathlib import Path

from testbed.control_plane.binaries import run_build_script

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"


class HelmBuildError(RuntimeError):
    pass


def build_helm(stream_output: bool = True) -> Path:
    """Builds (or finds, when already built) the pinned helm; returns the path of the binary.

    A cold build takes minutes on 2 cores; a warm call returns at once.
    KUBESLURM_HELM, when set, is used as is and nothing is built.
    """
    override = os.environ.get("KUBESLURM_HELM")
    if override:
        return Path(override)
    return run_build_script(BUILD_SCRIPT, stream_output=stream_output, error=HelmBuildError) / "helm"
