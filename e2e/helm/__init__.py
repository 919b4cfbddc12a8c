"""The pinned helm (e2e/helm/build.sh), for tests/helm and the end-to-end suite."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=None if stream_output else subprocess.PIPE,
        text=True,
    )
    if result.returncode != 0:
        raise HelmBuildError(
            f"{BUILD_SCRIPT} failed with exit code {result.returncode}"
            + (f":\n{result.stderr[-4000:]}" if result.stderr else " (its output is above)")
        )
    return Path(result.stdout.strip().splitlines()[-1]) / "helm"
