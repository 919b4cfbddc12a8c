"""How the operator reaches a cluster's slurmctld: exec into a controller pod once it is Ready.

Slurm's commands there reach whichever slurmctld is in control (slurm.conf lists both
hosts), so the backup's pod serves as well as the primary's while the primary is away."""

import subprocess
from typing import Callable

from ..api import SlurmCluster
from ..metrics.operator_metrics import measured_runner
from .kube_api import KubeApi
from .slurm_control import SlurmControl, pod_exec_runner

CONTROLLER_CONTAINER = "slurmctld"
SLURMD_CONTAINER = "slurmd"


def pod_ready(pod: dict | None) -> bool:
    if not pod or pod.get("status", {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions", []))


class SlurmAccess:
    def __init__(self, api: KubeApi, api_client):
        self.api = api
        self.api_client = api_client

    def __call__(self, cluster: SlurmCluster, controller_pod: dict | None) -> SlurmControl | None:
        """A SlurmControl through controller_pod (primary or backup), or None while it is not Ready."""
        if not pod_ready(controller_pod):
            return None
        meta = controller_pod["metadata"]
        runner = pod_exec_runner(self.api_client, meta["namespace"], meta["name"], CONTROLLER_CONTAINER)
        return SlurmControl(measured_runner(runner, cluster.metadata.namespace, cluster.metadata.name))

    def slurmd_runner(self, namespace: str) -> Callable[[str, list[str]], subprocess.CompletedProcess]:
        """Commands as root in the slurmd container of a slurmd pod (pod name = Slurm node name):
        the bridge's hold files, which only root there may write."""

        def run(node: str, argv: list[str]) -> subprocess.CompletedProcess:
            return pod_exec_runner(self.api_client, namespace, node, SLURMD_CONTAINER)(argv)

        return run
