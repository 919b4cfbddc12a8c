"""The pinned kind (testbed/kind/build.sh), built from the Go module proxy so that the e2e
tier's kind provider (testbed/cluster_providers.py) downloads nothing at run time."""

from __future__ import annotations

from pathlib import Path

from testbed.control_plane.binaries import run_build_script

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"


def build_kind() -> Path:
    """The kind binary; a cold build takes seconds to a minute, a warm call returns at once."""
    return run_build_script(BUILD_SCRIPT) / "kind"
