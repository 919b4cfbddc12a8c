"""Fixtures of the fault tier (pytest -m faults): the fault matrix of issue 17 on real Kubernetes.

The cluster and the operator are the e2e tier's (tests/conftest.py: the local cluster with
four nodes, the operator installed with helm from this checkout's images). One SlurmCluster
(examples/demo.yaml, two CPU nodes) in namespace `faults` serves every test of a run; each test
injects its fault under a stream of jobs (testbed/job_ledger.py JobStream) and ends with the
ledger's summary: every job submitted, none lost.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from testbed import deployment
from testbed.deployment import ROOT
from testbed.job_ledger import JobLedger
from testbed.kubectl import Kube
from testbed.waiting import wait_for

NAMESPACE = "faults"
CLUSTER = "research"
LOGIN = f"{CLUSTER}-login-0"
CONTROLLER = f"{CLUSTER}-controller-0"
MANIFEST = ROOT / "examples" / "demo.yaml"
CPU_NODES = 2
USABLE = ("idle", "alloc", "mix")


class Bed:
    """The SlurmCluster under test: Slurm commands in its login pod, its pods, its ledger."""

    def __init__(self, kube: Kube):
        self.kube = kube
        self.ledger = JobLedger(self.sh)

    def sh(self, script: str, user: str | None = None, check: bool = True, timeout: float = 120) -> str:
        command = ["runuser", "-l", user, "-c", script] if user else ["/bin/sh", "-c", script]
        result = self.kube.exec(NAMESPACE, LOGIN, "login", command, check=False, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{user or 'root'}$ {script}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def sbatch(self, args: str, user: str = "alice", must_complete: bool = True) -> str:
        """sbatch as a researcher, the job recorded in the ledger."""
        return self.ledger.sbatch(f"-o /dev/null {args}", user, run_as=lambda script, u: self.sh(script, u, timeout=60),
                                  must_complete=must_complete)

    def pod(self, name: str, namespace: str = NAMESPACE) -> dict | None:
        return self.kube.get("pod", name, "-n", namespace)

    def node_states(self) -> dict[str, str]:
        return dict(line.split("|") for line in self.sh("sinfo -N -h -o '%N|%t'").split())

    def wait_nodes_usable(self, names: set[str], timeout: float) -> float:
        """Seconds until every node in names is usable in sinfo (a command failing meanwhile: not yet)."""
        t0 = time.monotonic()

        def usable():
            try:
                states = self.node_states()
            except AssertionError:
                return None
            return all(states.get(n, "").startswith(USABLE) for n in names) or None
        wait_for(usable, timeout, f"{sorted(names)} usable in sinfo", interval=2,
                 details=lambda: str(self.node_states()))
        return time.monotonic() - t0

    def job_runs(self, job: str) -> list[str]:
        """sacct -D: each run of the job, oldest first."""
        return [line.split("|")[0] for line in self.sh(f"sacct -n -X -P -D -j {job} -o State").split()]

    def job_state(self, job: str) -> str:
        match = re.search(r"JobState=(\S+)", self.sh(f"scontrol show job {job} --oneliner", check=False))
        return match.group(1) if match else (self.job_runs(job) or ["MISSING"])[-1]

    def wait_running(self, job: str, timeout: float = 120) -> None:
        wait_for(lambda: self.job_state(job) == "RUNNING", timeout, f"job {job} running", interval=1)

    def wait_ready(self, name: str, timeout: float, old_uid: str | None = None) -> float:
        """Seconds until pod name is Ready (a new one, when old_uid is given)."""
        t0 = time.monotonic()
        wait_for(lambda: pod_ready(self.pod(name)) and self.pod(name)["metadata"]["uid"] != old_uid,
                 timeout, f"pod {name} Ready" + (" (a new one)" if old_uid else ""), interval=2,
                 details=lambda: deployment.pods_summary(self.kube, NAMESPACE))
        return time.monotonic() - t0

    def restarts(self, pod: str, container: str) -> int:
        return next(c["restartCount"] for c in self.pod(pod)["status"]["containerStatuses"] if c["name"] == container)

    def settle_and_report(self, fault: str, timeout: float = 600) -> None:
        """Every job of the test in a final state in sacct; prints the one-line summary; none lost."""
        summary = self.ledger.settle(timeout)
        print(f"\n{summary.line(fault)}", flush=True)
        assert summary.submitted > 0 and summary.lost == [] and summary.unexpected == [], summary.line(fault)


def pod_ready(pod: dict | None) -> bool:
    return bool(pod) and not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


@pytest.fixture(scope="session")
def slurm_cluster(kube, operator):
    """The SlurmCluster of the run, usable; deleted at the end."""
    client, _local = kube

    def two_cpu_nodes(document):
        if document["kind"] == "NodeSet" and document["metadata"]["name"] == "cpu":
            document["spec"]["replicas"] = CPU_NODES
    deployment.apply_in_fresh_namespace(client, MANIFEST, NAMESPACE, two_cpu_nodes)
    deployment.wait_usable(client, NAMESPACE, CLUSTER, 900, report=lambda line: print(line, flush=True))
    yield client
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture
def bed(slurm_cluster, kube):
    """A fresh ledger per test, on a cluster whose nodes are all usable when the test starts."""
    bed = Bed(slurm_cluster)
    deployment.wait_usable(slurm_cluster, NAMESPACE, CLUSTER, 600, report=lambda line: None)
    bed.wait_nodes_usable({"h100-0", *(f"cpu-{i}" for i in range(CPU_NODES))}, 300)
    return bed


@pytest.fixture
def local_cluster(kube):
    """The local cluster, for faults only it can inject (a killed process, a stopped API server)."""
    _client, local = kube
    if not local:
        pytest.skip("injects a fault into the local cluster's machine")
    from testbed.local_cluster import LocalCluster
    return LocalCluster(verbose=True)


def operator_pod(kube: Kube) -> dict:
    pods = kube.get("pods", "-n", deployment.OPERATOR_NAMESPACE, "-l",
                    f"app.kubernetes.io/instance={deployment.OPERATOR_RELEASE}")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert live, json.dumps([p["metadata"]["name"] for p in pods])
    return live[0]
