"""A placeholder job preempted by a higher-QOS training job, on real Slurm 24.11 (spec.bridge).

Inference placeholders run in QOS `serving`; alice's training QOS `training` preempts it
(`scheduling.preemption: qos`, so slurm.conf says PreemptMode=REQUEUE). A placeholder is
submitted --no-requeue, so preemption ends it instead of requeueing it: its pod is deleted
(the pod's owner makes a new pod with a new job), and meanwhile the bridge's Epilog keeps its
GPUs held. Shown here: the training job waits until the pod is gone, then starts on the GPUs
the placeholder had, and the placeholder is recorded as PREEMPTED.
"""

from __future__ import annotations

import time
import uuid

import pytest

from kubeslurm.reconcile.bridge_plan import BridgedPod, BridgePlan, plan_bridge
from kubeslurm.render.bridge.placeholder_job import PlaceholderRequest, hold_argv, release_argv
from testbed.waiting import wait_for
from tests.slurm.conftest import running_with_accounts

from .test_scheduling_policies import Policies

pytestmark = pytest.mark.slurm

CLUSTER = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
    "metadata": {"name": "preempt", "namespace": "hpc"},
    "spec": {
        "accounting": {"enabled": True},
        "scheduling": {"preemption": "qos"},
        "qos": [{"name": "training", "priority": 100, "preempt": ["serving"]}, {"name": "serving"}],
        "accounts": [
            {"name": "serving", "users": ["svc-serving"], "qos": ["serving"], "defaultQOS": "serving"},
            {"name": "vision", "users": ["alice"], "qos": ["training"], "defaultQOS": "training"},
        ],
        "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
        "bridge": {"enabled": True, "namespaces": [
            {"namespace": "inference", "account": "serving", "user": "svc-serving", "qos": "serving", "partition": "gpu"},
        ]},
    },
}
NODE_SETS = [{"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": "gpu", "namespace": "hpc"},
              "spec": {"clusterName": "preempt", "replicas": 1, "resources": {"cpu": "4", "memory": "4Gi"},
                       "gpus": {"count": 2, "type": "a100"}}}]
NODE = "gpu-0"


@pytest.fixture(scope="module")
def preempt(slurm_rootfs, request):
    with running_with_accounts(slurm_rootfs, request, [CLUSTER, *NODE_SETS], "preempt") as (model, node_sets, cluster, control):
        yield model, cluster, control


def test_training_preempts_a_placeholder_and_starts_only_once_its_pod_is_gone(preempt):
    model, cluster, control = preempt
    p = Policies(cluster)
    (mapping,) = model.spec.bridge.namespaces
    request = PlaceholderRequest(namespace=mapping.namespace, pod_name="server-0", pod_uid=str(uuid.uuid4()),
                                 account=mapping.account, user=mapping.user, qos=mapping.qos,
                                 partition=mapping.partition, cpus=1, memory_mib=256, gpus=2)
    job = control.submit_placeholder(request)
    wait_for(lambda: control.job_allocation(job).state == "RUNNING", 60, f"placeholder {job} running")
    held = control.job_allocation(job).nodes[NODE].gpu_indices
    assert held == (0, 1) and p.field(job, "QOS") == "serving"
    cluster.run(NODE, hold_argv(job))
    bound = BridgedPod(request.namespace, request.pod_name, request.pod_uid, node_name="node-a")

    training = p.sbatch("--gres=gpu:2 --wrap 'sleep 5'")  # alice: QOS training by default
    wait_for(lambda: control.job_allocation(job).state == "COMPLETING", 60, f"placeholder {job} preempted")
    plan = plan_bridge([bound], control.placeholder_jobs([mapping.user]), {NODE: "node-a"})
    assert plan == BridgePlan(delete_pods=[bound]), plan  # not requeued: its pod goes, its GPUs stay held
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the pod terminates
        assert p.field(training, "JobState") == "PENDING", p.field(training, "Reason")
        time.sleep(1)

    plan = plan_bridge([], control.placeholder_jobs([mapping.user]), {NODE: "node-a"})  # the pod is gone
    assert plan == BridgePlan(release=[(job, (NODE,))]), plan
    cluster.run(NODE, release_argv(job))
    wait_for(lambda: control.job_allocation(training).state == "RUNNING", 90, f"training job {training} running")
    assert control.job_allocation(training).nodes[NODE].gpu_indices == held
    p.wait_sacct(training, "COMPLETED", timeout=60)
    assert p.sacct(job, "State")[0].split()[0] == "PREEMPTED"
