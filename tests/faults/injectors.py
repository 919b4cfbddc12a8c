"""The faults the matrix and the soak inject, each as a site meets it. Each returns once the fault
is in (not once the cluster recovered: the caller measures that)."""

from __future__ import annotations

import time

from testbed import deployment
from tests.faults.conftest import CLUSTER, CONTROLLER, NAMESPACE


def kill_slurmd_container(bed, local_cluster, node: str) -> str:
    """slurmd's container SIGKILLed on its machine (a crash, the OOM killer); the pod stays."""
    status = next(c for c in bed.pod(node)["status"]["containerStatuses"] if c["name"] == "slurmd")
    local_cluster.kill_container(status["containerID"])
    return f"slurmd container of {node} killed"


def delete_pod(bed, name: str) -> str:
    """A pod deleted (an eviction, an admin's mistake): its StatefulSet makes it again."""
    bed.kube.run("delete", "pod", name, "-n", NAMESPACE, "--wait=false")
    return f"pod {name} deleted"


def kill_operator(bed) -> str:
    """The operator's pod deleted with no grace: its process SIGKILLed wherever it stood."""
    return deployment.kill_operator(bed.kube)


def stop_api_server(local_cluster, seconds: float) -> str:
    """etcd and kube-apiserver stopped for `seconds`, then started again."""
    with local_cluster.api_server_stopped():
        time.sleep(seconds)
    return f"etcd and kube-apiserver stopped for {seconds:.0f} s"


def soak_faults(bed, local_cluster) -> dict:
    """The soak's menu: name -> a callable injecting it (local-cluster faults only when local)."""
    menu = {
        "slurmd pod deleted": lambda rng: delete_pod(bed, rng.choice(["cpu-0", "cpu-1", "h100-0"])),
        "slurmctld pod deleted": lambda rng: delete_pod(bed, CONTROLLER),
        "MariaDB pod deleted": lambda rng: delete_pod(bed, f"{CLUSTER}-mariadb-0"),
        "slurmdbd pod deleted": lambda rng: delete_pod(bed, f"{CLUSTER}-accounting-0"),
        "operator killed": lambda rng: f"operator pod {kill_operator(bed)} killed",
    }
    if local_cluster is not None:
        menu["slurmd container killed"] = lambda rng: kill_slurmd_container(
            bed, local_cluster, rng.choice(["cpu-0", "cpu-1", "h100-0"]))
        menu["API server and etcd stopped"] = lambda rng: stop_api_server(local_cluster, 45)
    return menu
