"""QOS from the SlurmCluster (spec.qos, accounts' qos) with `preemption: qos`, on real Slurm.

A cluster rendered from a spec a site would write: QOS `high` (priority 100, preempts
`low`, jobs at most 10 minutes) and `low`; alice's account may use only `low` (its
default), bob's `high` and `low`. One 2-CPU node, so a whole-node job of alice's
blocks bob's. The QOS reach Slurm through the operator's own sacctmgr path.
"""

from __future__ import annotations

import pytest

from kubeslurm.render.config.accounting_commands import accounting_commands
from testbed.native_slurm.rendered import load, native_cluster, slurm_control
from tests.slurm.conftest import stopped_after

from .test_scheduling_policies import Policies

pytestmark = pytest.mark.slurm

CLUSTER = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
    "metadata": {"name": "qos", "namespace": "hpc"},
    "spec": {
        "accounting": {"enabled": True},
        "scheduling": {"preemption": "qos"},
        "qos": [
            {"name": "high", "priority": 100, "preempt": ["low"], "limits": {"maxJobTime": "00:10:00"}},
            {"name": "low"},
        ],
        "accounts": [
            {"name": "vision", "users": ["alice"], "qos": ["low"], "defaultQOS": "low"},
            {"name": "nlp", "users": ["bob"], "qos": ["high", "low"], "defaultQOS": "low"},
        ],
        "partitions": [{"name": "cpu", "nodeSets": ["cpu"], "default": True}],
    },
}
NODE_SETS = [{"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": "cpu", "namespace": "hpc"},
              "spec": {"clusterName": "qos", "replicas": 1, "resources": {"cpu": "2", "memory": "2Gi"}}}]


@pytest.fixture(scope="module")
def qos(slurm_rootfs, request):
    model, node_sets = load([CLUSTER, *NODE_SETS])
    cluster = native_cluster(slurm_rootfs, model, node_sets, name="qos")
    with stopped_after(cluster, request):
        cluster.start()
        control = slurm_control(cluster)
        control.sacctmgr(accounting_commands(model))
        control.sacctmgr(accounting_commands(model))  # the operator re-applies the list: nothing fails
        yield Policies(cluster)


def test_the_spec_s_qos_are_in_slurm(qos):
    out = qos.c.run(qos.c.controller, "sacctmgr -n -P show qos format=Name,Priority,Preempt,MaxWall").stdout
    rows = {line.split("|")[0]: line.split("|")[1:] for line in out.split("\n") if line}
    assert rows["high"] == ["100", "low", "00:10:00"], out
    assert rows["low"] == ["0", "", ""], out
    assocs = qos.c.run(qos.c.controller, "sacctmgr -n -P show assoc where cluster=qos format=User,QOS,DefaultQOS").stdout
    by_user = {line.split("|")[0]: line.split("|")[1:] for line in assocs.split("\n") if line and line.split("|")[0]}
    assert by_user["alice"] == ["low", "low"] and sorted(by_user["bob"][0].split(",")) == ["high", "low"], assocs


def test_a_researcher_gets_only_the_qos_of_her_account(qos):
    refused = qos.sh("sbatch -o /dev/null --qos=high --wrap true", check=False)
    assert refused.returncode != 0 and "Invalid qos specification" in refused.stderr, refused.stderr
    job = qos.sbatch("--wrap true")  # no --qos: the account's default
    assert qos.field(job, "QOS") == "low"
    qos.wait_sacct(job, "COMPLETED")


def test_a_qos_limit_holds_a_job_that_asks_for_more(qos):
    job = qos.sbatch("--qos=high --time=20 --wrap true", user="bob")
    qos.wait_reason(job, "QOSMaxWallDurationPerJobLimit")
    qos.c.run(qos.c.controller, f"scancel {job}")


def test_a_high_qos_job_requeues_a_running_low_qos_job_which_completes_later(qos):
    low = qos.sbatch("--exclusive --wrap 'sleep 20'")
    qos.wait_state(low, "RUNNING")
    high = qos.sbatch("--qos=high --exclusive --time=5 --wrap 'sleep 2'", user="bob")
    qos.wait_sacct(high, "COMPLETED", timeout=60)
    # preempted with PreemptMode=REQUEUE: back in the queue, and its second run completes
    qos.wait(lambda: int(qos.field(low, "Restarts") or 0) >= 1, 30, f"job {low} requeued")
    qos.wait_sacct(low, "COMPLETED", timeout=240)
