"""Which slurmctld pod the operator talks to Slurm through: the primary's, or the backup's while
the primary's is not Ready (Slurm's commands in either pod reach whichever slurmctld is in
control), so a lost primary does not stop the operator's Slurm work once the backup took over."""

import subprocess

import pytest

from kubeslurm import ownership
from kubeslurm.api import SlurmCluster
from kubeslurm.reconcile.cluster_reconcile import ClusterReconciler
from kubeslurm.reconcile.run_state import Run
from kubeslurm.reconcile.slurm_access import pod_ready
from kubeslurm.reconcile.slurm_control import SlurmControl

from .manifests import contract_documents, set_path, with_uid

CLUSTER, _, _ = contract_documents()
PRIMARY, BACKUP = "research-controller-0", "research-controller-1"


def pod(name: str, phase: str = "Running", ready: bool = True) -> dict:
    return {"metadata": {"name": name, "namespace": "hpc"},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


READY = "ready"
NOT_READY = "not ready"  # running, its slurmctld not listening yet
PENDING = "pending"  # not placed: its node is lost, or no node has room
GONE = "gone"
PODS = {READY: lambda n: pod(n), NOT_READY: lambda n: pod(n, ready=False),
        PENDING: lambda n: pod(n, phase="Pending", ready=False), GONE: lambda n: None}


class PodsOnlyApi:
    """The reads of ObserveKubernetes: no listed objects, no slurmd pods, the controller pods by name."""

    def __init__(self, pods: dict[str, dict | None]):
        self.pods = pods
        self.got: list[str] = []

    def list(self, kind, namespace, selector=None):
        return []

    def get(self, kind, namespace, name):
        assert kind == ownership.POD and namespace == "hpc", (kind, namespace)
        self.got.append(name)
        return self.pods.get(name)


def observe(backup: bool, primary_state: str, backup_state: str) -> tuple[list[str], Run, PodsOnlyApi]:
    raw = with_uid(set_path(CLUSTER, "spec.controller.backup", backup))
    api = PodsOnlyApi({PRIMARY: PODS[primary_state](PRIMARY), BACKUP: PODS[backup_state](BACKUP)})
    through: list[str] = []

    def slurm_for(cluster, controller_pod):
        # SlurmAccess's rule: a pod that is not Ready gives no access.
        if not pod_ready(controller_pod):
            return None
        through.append(controller_pod["metadata"]["name"])
        return SlurmControl(lambda argv, timeout=60: subprocess.CompletedProcess(argv, 0, "", ""))

    reconciler = ClusterReconciler(api, slurm_for, events=None)
    run = Run(raw=raw, cluster=SlurmCluster.model_validate(raw))
    reconciler.observe_kubernetes(run)
    reconciler.observe_slurm(run)
    return through, run, api


@pytest.mark.parametrize(
    "backup,primary_state,backup_state,expected",
    [
        (False, READY, GONE, [PRIMARY]),
        (False, NOT_READY, READY, []),  # without spec.controller.backup a stray pod 1 is never used
        (True, READY, READY, [PRIMARY]),  # the primary's pod first: that slurmctld rules whenever it runs
        (True, NOT_READY, READY, [BACKUP]),
        (True, PENDING, READY, [BACKUP]),
        (True, GONE, READY, [BACKUP]),
        (True, GONE, NOT_READY, []),
        (True, PENDING, GONE, []),
    ],
)
def test_slurm_is_reached_through_the_primary_s_pod_else_the_backup_s(backup, primary_state, backup_state, expected):
    through, run, api = observe(backup, primary_state, backup_state)
    assert through == expected
    # No access, no Slurm observations: the steps that need slurmctld wait for it.
    assert (run.slurm is not None) == bool(expected)
    assert (run.slurm_nodes is not None, run.slurm_jobs is not None) == (bool(expected), bool(expected))
    # the backup's pod is read only for a cluster that has one
    assert api.got == ([PRIMARY, BACKUP] if backup else [PRIMARY])


def test_the_config_roll_is_judged_by_the_primary_s_pod_even_when_the_backup_s_serves():
    # _reconfigure compares the running config hash of run.controller_pod: the primary's, which a
    # roll replaces last (StatefulSets update the highest ordinal first).
    _, run, _ = observe(True, PENDING, READY)
    assert run.controller_pod["metadata"]["name"] == PRIMARY
    assert run.backup_controller_pod["metadata"]["name"] == BACKUP
