"""The operator as a real process (`kubeslurm run`) with its own ServiceAccount and RBAC."""

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from testbed import REPO
from testbed.control_plane.control_plane import free_port
from testbed.processes import Supervisor
from testbed.waiting import wait_for

RBAC = REPO / "deploy" / "rbac.yaml"
OPERATOR_NAMESPACE = "kubeslurm-system"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:kubeslurm-operator"
NEW_CLUSTER_SECONDS = 10  # KUBESLURM_NEW_CLUSTER_SECONDS of the operator under test (60 s by default)


class OperatorProcess:
    def __init__(self, kubeconfig: Path, log_path: Path, resync_seconds: float = 3, namespaces: tuple[str, ...] = (),
                 launcher: tuple[str, ...] = (sys.executable, "-m", "kubeslurm.cli")):
        """launcher: what runs `run ...` (the scale benchmark's reaches a native slurmctld)."""
        self.launcher = launcher
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.resync_seconds = resync_seconds
        self.namespaces = namespaces  # watched namespaces (--namespace each); empty: all
        self.popen: subprocess.Popen | None = None
        # A free port of its own: other sessions' operators may run on this machine too.
        self.metrics_port = free_port()

    def start(self) -> None:
        # A new cluster waits this long for the NodeSets its partitions name (awaited_node_sets.py),
        # so a test sees the InvalidSpec that follows without waiting the default minute.
        env = dict(os.environ, KUBESLURM_RESYNC_SECONDS=str(self.resync_seconds), KUBESLURM_NEW_CLUSTER_SECONDS=str(NEW_CLUSTER_SECONDS))
        env.pop("KUBECONFIG", None)
        # Recorded beside its log, and killed with the test session even when that is killed.
        self.supervisor = Supervisor(self.log_path.with_suffix(".processes.json"), die_with_parent=True)
        self.popen = self.supervisor.spawn(
            "operator",
            [*self.launcher, "run", "--kubeconfig", str(self.kubeconfig), "--liveness", "",
             f"--metrics-port={self.metrics_port}", *(f"--namespace={namespace}" for namespace in self.namespaces)],
            marker=str(self.kubeconfig), log=self.log_path, env=env,
        )

    def stop(self) -> None:
        if self.popen is None:
            return
        self.supervisor.stop(grace=30)
        self.popen = None

    def scrape(self) -> dict[str, list]:
        """GET /metrics over HTTP, parsed by prometheus_client: family name -> its samples."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return {family.name: family.samples for family in text_string_to_metric_families(text)}

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def eventually(check, timeout: float = 60, interval: float = 0.5, what: str = "condition"):
    """wait_for where check() raising (the object may not exist yet) counts as not yet."""
    return wait_for(check, timeout, what, interval=interval, ignore=(Exception,))
