"""Fixtures of the helm chart tests (pytest -m helm).

`helm` runs the pinned helm (testbed/helm/build.sh; a cold build takes about 3 minutes on 2 cores,
later runs reuse ${KUBESLURM_CACHE:-~/.cache/kubeslurm}/helm/<version>/bin/helm) with its own
config, cache and data directories, so a user's repositories and plugins play no part.
The install tests use the real API server of tests/conftest.py (`control_plane`, `namespace`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.helm import build_helm
from tests.conftest import output_shown

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "charts"
OPERATOR_CHART = CHARTS / "kubeslurm-operator"
CLUSTER_CHART = CHARTS / "slurm-cluster"


class Helm:
    def __init__(self, binary: Path, home: Path):
        self.binary = binary
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.binary), *map(str, args)], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(map(str, args))} exited {result.returncode}:\n{result.stderr}{result.stdout}")
        return result

    def template(self, release: str, chart: Path, *args: str) -> list[dict]:
        """The rendered objects of `helm template`."""
        return [doc for doc in yaml.safe_load_all(self("template", release, chart, *args).stdout) if doc]


@pytest.fixture(scope="session")
def helm(pytestconfig, tmp_path_factory) -> Helm:
    with output_shown(pytestconfig):
        binary = build_helm()
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))
