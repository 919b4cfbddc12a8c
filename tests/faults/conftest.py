"""Fixtures of the fault tier (pytest -m faults): the fault matrix of issue 17 on real Kubernetes.

The cluster and the operator are the e2e tier's (tests/conftest.py: the local cluster with
four nodes, the operator installed with helm from this checkout's images). One SlurmCluster
(examples/demo.yaml, two CPU nodes) in namespace `faults` serves every test of a run; each test
injects its fault under a stream of jobs (testbed/job_ledger.py JobStream) and ends with the
ledger's summary: every job submitted, none lost.

On the local cluster, slurmctld's state claim is bound to a bounded volume: a 64 MiB tmpfs on
this host (every node of the local cluster shares the host's file system, so the controller
finds its state on whichever node it lands). The default StorageClass there is
kube-controller-manager's hostPath provisioner, whose volumes are directories on the host's
disk with no size limit: filling one would fill the machine. The tmpfs gives the disk-full
test a real ENOSPC at 64 MiB and costs at most that much memory.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from testbed import deployment
from testbed.deployment import ROOT, operator_pod  # operator_pod: the fault tests import it from here
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
SLURM_NODES = {"h100-0", *(f"cpu-{i}" for i in range(CPU_NODES))}
# The controller's state volume on the local cluster (see above): a tmpfs on the host, bound to
# the state claim by a PersistentVolume of a class no provisioner serves.
STATE_CLAIM = f"{CLUSTER}-controller-state"
STATE_VOLUME_PATH = Path("/run/kubeslurm-faults-state")
STATE_VOLUME_SIZE = "64Mi"
STATE_VOLUME_CLASS = "kubeslurm-faults-state"


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
                 details=lambda: self.sh("sinfo -N -h -o '%N %t %E'", check=False))
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


def _unmount_state_volume() -> None:
    """Lazily: a container still holding it keeps it until it goes, then the memory is freed."""
    if subprocess.run(["mountpoint", "-q", str(STATE_VOLUME_PATH)]).returncode == 0:
        subprocess.run(["umount", "-l", str(STATE_VOLUME_PATH)], check=True)


def bounded_state_volume(client: Kube) -> None:
    """A fresh 64 MiB tmpfs at STATE_VOLUME_PATH and a PersistentVolume on it, reserved for the
    state claim (claimRef), replacing what a previous run left."""
    client.run("delete", "pv", STATE_VOLUME_CLASS, "--ignore-not-found", "--timeout=60s")
    _unmount_state_volume()
    STATE_VOLUME_PATH.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STATE_VOLUME_SIZE.removesuffix('i').lower()},mode=0755",
                    "kubeslurm-faults-state", str(STATE_VOLUME_PATH)], check=True)
    client.apply(json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": STATE_VOLUME_CLASS},
        "spec": {
            "capacity": {"storage": STATE_VOLUME_SIZE},
            "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": STATE_VOLUME_CLASS,
            "claimRef": {"namespace": NAMESPACE, "name": STATE_CLAIM},
            "hostPath": {"path": str(STATE_VOLUME_PATH)},
        },
    }))


@pytest.fixture(scope="session")
def slurm_cluster(kube, operator):
    """The SlurmCluster of the run, usable; deleted at the end."""
    client, local = kube

    def adjust(document):
        if document["kind"] == "NodeSet" and document["metadata"]["name"] == "cpu":
            document["spec"]["replicas"] = CPU_NODES
        if document["kind"] == "SlurmCluster" and local:
            document["spec"].setdefault("controller", {})["persistence"] = {
                "size": STATE_VOLUME_SIZE, "storageClassName": STATE_VOLUME_CLASS}
    # The old claim must be gone before its volume is replaced.
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=300s")
    if local:
        bounded_state_volume(client)
    deployment.apply_in_fresh_namespace(client, MANIFEST, NAMESPACE, adjust)
    deployment.wait_usable(client, NAMESPACE, CLUSTER, 900, report=lambda line: print(line, flush=True))
    yield client
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
    if local:
        client.run("delete", "pv", STATE_VOLUME_CLASS, "--ignore-not-found", "--wait=false", check=False)
        _unmount_state_volume()


@pytest.fixture
def bed(slurm_cluster, kube):
    """A fresh ledger per test, on a cluster whose nodes are all usable when the test starts."""
    bed = Bed(slurm_cluster)
    deployment.wait_usable(slurm_cluster, NAMESPACE, CLUSTER, 600, report=lambda line: None)
    bed.wait_nodes_usable(SLURM_NODES, 300)
    return bed


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    return rep


@pytest.fixture(autouse=True)
def state_on_failure(request, kube):
    """A fault test that failed prints what Slurm, the operator and slurmctld said at that moment:
    a timeout alone ("job 1 not COMPLETED") does not tell a held job from a DOWN node."""
    yield
    report = getattr(request.node, "rep_call", None) or getattr(request.node, "rep_setup", None)
    if report is None or not report.failed:
        return
    client, _local = kube
    print("\n--- state after the failure ---", flush=True)
    for title, argv in (
        ("sinfo -R", ["exec", "-n", NAMESPACE, LOGIN, "-c", "login", "--", "sinfo", "-R", "-o", "%N|%T|%E"]),
        ("squeue", ["exec", "-n", NAMESPACE, LOGIN, "-c", "login", "--", "squeue", "-a", "-o", "%i|%T|%r|%S|%N"]),
        ("jobs", ["exec", "-n", NAMESPACE, LOGIN, "-c", "login", "--", "scontrol", "show", "job", "--oneliner"]),
        ("slurmctld log", ["logs", "-n", NAMESPACE, CONTROLLER, "-c", "slurmctld", "--tail", "80"]),
        ("operator log", ["logs", "-n", deployment.OPERATOR_NAMESPACE, f"deploy/{deployment.OPERATOR_RELEASE}",
                          "--tail", "60"]),
        ("events", ["get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"]),
    ):
        try:
            result = client.run(*argv, check=False, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"\n## {title}: no answer within 60 s", flush=True)
            continue
        print(f"\n## {title}\n{(result.stdout or '')[-6000:]}{(result.stderr or '')[-500:]}", flush=True)
    print(deployment.pods_summary(client, NAMESPACE), flush=True)


@pytest.fixture
def local_cluster(kube):
    """The local cluster, for faults only it can inject (a killed process, a stopped API server)."""
    _client, local = kube
    if not local:
        pytest.skip("injects a fault into the local cluster's machine")
    from testbed.local_cluster import LocalCluster
    return LocalCluster(verbose=True)


