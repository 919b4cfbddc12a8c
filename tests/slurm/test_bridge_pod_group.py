"""A pod group's one placeholder job (gang), on real Slurm 24.11 with two 2-GPU nodes.

The group's job is submitted with the very argv the operator uses (render/bridge/placeholder_job.py
through SlurmControl): one job of two nodes, one member per node, each with its GPU. What the
bridge relies on, shown on real Slurm:

- squeue reads the job back with both members' UIDs and both nodes; the bridge's decision binds
  each member to its own node, and `scontrol --details show job` names each node's GPU index;
- Slurm starts the group whole or not at all: a group bigger than the partition is refused by
  sbatch at once (the operator shows that on the pods), never started in part;
- cancelled (a member deleted), the job stays COMPLETING on both nodes while a member is still
  terminating: a job of alice's that needs every GPU of both nodes waits; once both members are
  gone the hold is released on each node and her job runs;
- the operator's pass (bridge_sync) with the real API server: nothing asked for while one of
  two members exists (the pod says so), one job once both do, each member bound to its own node
  with its GPU in the placement record, and a deleted member ending the whole group.
"""

from __future__ import annotations

import time
import uuid

import pytest

from kubeslurm.ownership import CONFIG_MAP, POD, SLURM_CLUSTER
from kubeslurm.reconcile.bridge_plan import BridgedPod, BridgePlan, PodGroup, plan_bridge
from kubeslurm.reconcile.bridge_pods import POD_GROUP_LABEL, POD_GROUP_SIZE_ANNOTATION
from kubeslurm.reconcile.bridge_sync import BridgeAccess, sync_bridge
from kubeslurm.reconcile.events import EventRecorder
from kubeslurm.reconcile.kube_api import KubeApi, load_api_client
from kubeslurm.reconcile.slurm_control import SlurmCommandError
from kubeslurm.render.bridge.placeholder_job import HOLD_DIR, PlaceholderRequest, hold_argv, release_argv
from kubeslurm.render.bridge.placements import placements_config_map_name, read_placements
from testbed import REPO
from testbed.waiting import wait_for
from tests.slurm.conftest import running_with_accounts

from .test_scheduling_policies import Policies

pytestmark = pytest.mark.slurm

CLUSTER = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
    "metadata": {"name": "gang", "namespace": "hpc"},
    "spec": {
        "accounting": {"enabled": True},
        "accounts": [{"name": "training", "users": ["svc-train"]}, {"name": "vision", "users": ["alice"]}],
        "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
        "bridge": {"enabled": True, "namespaces": [
            {"namespace": "jobs", "account": "training", "user": "svc-train", "partition": "gpu"},
        ]},
    },
}
NODE_SETS = [{"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": "gpu", "namespace": "hpc"},
              "spec": {"clusterName": "gang", "replicas": 2, "resources": {"cpu": "2", "memory": "2Gi"},
                       "gpus": {"count": 2, "type": "a100"}}}]
NODES = ("gpu-0", "gpu-1")
KUBERNETES_NODES = {"gpu-0": "node-a", "gpu-1": "node-b"}  # where each slurmd pod would run


@pytest.fixture(scope="module")
def gang(slurm_rootfs, request):
    with running_with_accounts(slurm_rootfs, request, [CLUSTER, *NODE_SETS], "gang") as (model, node_sets, cluster, control):
        yield model, cluster, control


def group_of(model, size: int) -> tuple[PlaceholderRequest, tuple[BridgedPod, ...]]:
    (mapping,) = model.spec.bridge.namespaces
    members = tuple(BridgedPod(mapping.namespace, f"train-{i}", str(uuid.uuid4()), gpus=1, group="train", group_size=size)
                    for i in range(size))
    request = PlaceholderRequest(
        namespace=mapping.namespace, pod_name=members[0].name, pod_uid=members[0].uid,
        account=mapping.account, user=mapping.user, partition=mapping.partition,
        cpus=1, memory_mib=256, gpus=1, group="train", group_uids=tuple(m.uid for m in members))
    return request, members


def test_a_group_bigger_than_the_partition_is_refused_not_started_in_part(gang):
    model, _cluster, control = gang
    request, _members = group_of(model, 3)
    with pytest.raises(SlurmCommandError, match="sbatch"):
        control.submit_placeholder(request)
    assert not control.placeholder_jobs([request.user])


def test_a_group_runs_whole_one_member_per_node_and_holds_every_node_until_all_are_gone(gang):
    model, cluster, control = gang
    p = Policies(cluster)
    request, members = group_of(model, 2)
    users = [request.user]
    assert plan_bridge(list(members), [], KUBERNETES_NODES) == \
        BridgePlan(submit_groups=[PodGroup(request.namespace, "train", members)])
    job = control.submit_placeholder(request)
    wait_for(lambda: control.job_allocation(job).state == "RUNNING", 60, f"group job {job} running")

    (listed,) = control.placeholder_jobs(users)
    assert (listed.job_id, listed.state, listed.group_uids, listed.nodes) == (job, "RUNNING", request.group_uids, NODES)
    plan = plan_bridge(list(members), [listed], KUBERNETES_NODES)
    assert [(b.pod.name, b.slurm_nodes, b.kubernetes_node) for b in plan.bind] == \
        [("train-0", ("gpu-0",), "node-a"), ("train-1", ("gpu-1",), "node-b")], plan
    allocation = control.job_allocation(job)
    assert sorted(allocation.nodes) == list(NODES), allocation
    assert all(len(allocation.nodes[n].gpu_indices) == 1 for n in NODES), allocation
    assert (p.field(job, "NumNodes"), p.field(job, "Account")) == ("2", "training")
    for binding in plan.bind:  # the operator, before it binds each member
        cluster.run(binding.slurm_nodes[0], hold_argv(job))
    bound = [BridgedPod(**{**m.__dict__, "node_name": KUBERNETES_NODES[n], "admitted": True}) for m, n in zip(members, NODES)]
    assert plan_bridge(bound, control.placeholder_jobs(users), KUBERNETES_NODES).empty

    # alice wants every GPU of both nodes: she waits while the group holds one on each.
    wanted = p.sbatch("--nodes=2 --gres=gpu:2 --wrap 'sleep 1'")
    p.wait_reason(wanted, "Resources")

    # train-0 is deleted: the group cannot run in part, so its job is cancelled and train-1 deleted.
    deleting = BridgedPod(**{**bound[0].__dict__, "deleting": True})
    plan = plan_bridge([deleting, bound[1]], control.placeholder_jobs(users), KUBERNETES_NODES)
    assert plan == BridgePlan(cancel=[job], delete_pods=[bound[1]]), plan
    control.cancel_placeholder(job)
    wait_for(lambda: control.job_allocation(job).state == "COMPLETING", 30, f"group job {job} completing")
    terminating = [deleting, BridgedPod(**{**bound[1].__dict__, "deleting": True})]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # both still terminating: nothing of either node is handed out
        assert control.job_allocation(job).state == "COMPLETING"
        assert p.field(wanted, "JobState") == "PENDING", p.field(wanted, "Reason")
        assert plan_bridge(terminating, control.placeholder_jobs(users), KUBERNETES_NODES).empty
        assert plan_bridge(terminating[1:], control.placeholder_jobs(users), KUBERNETES_NODES).empty  # one gone
        time.sleep(1)

    plan = plan_bridge([], control.placeholder_jobs(users), KUBERNETES_NODES)  # both gone
    assert plan == BridgePlan(release=[(job, NODES)]), plan
    for node in NODES:
        cluster.run(node, release_argv(job))
    wait_for(lambda: control.job_allocation(wanted).state in ("RUNNING", "COMPLETING", "COMPLETED"), 90,
             f"alice's job {wanted} started once the group's GPUs were released")
    p.wait_sacct(wanted, "COMPLETED", timeout=60)


def member_manifest(name: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "jobs", "labels": {POD_GROUP_LABEL: "train"},
                     "annotations": {POD_GROUP_SIZE_ANNOTATION: "2"}},
        "spec": {"schedulerName": "kubeslurm-gang", "containers": [{
            "name": "worker", "image": "registry.example/worker:1",
            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"kubeslurm.io/gpu": "1"}}}]},
    }


def test_the_operators_pass_submits_a_group_once_whole_and_binds_each_member_to_its_node(gang, control_plane):
    """bridge_sync with the real API server (the k8s tier's control plane; no kubelet: the slurmd
    pods' placement is given, and "gone" is a forced deletion)."""
    model, cluster, control = gang
    kube = KubeApi(load_api_client(str(control_plane.kubeconfig_path)))
    for namespace in ("jobs", "hpc"):
        control_plane.kubectl("create", "namespace", namespace, check=False)
    control_plane.apply_crds(REPO / "crds")
    stored = kube.get(SLURM_CLUSTER, "hpc", "gang") or kube.create(CLUSTER)  # owns the placement record
    model = model.model_copy(update={"metadata": model.metadata.model_copy(update={"uid": stored["metadata"]["uid"]})})
    access = BridgeAccess(kube, control, lambda node, argv: cluster.run(node, argv, check=False), EventRecorder(kube))
    slurmd_pods = [{"metadata": {"name": n}, "spec": {"nodeName": k}} for n, k in KUBERNETES_NODES.items()]

    def sync():
        return sync_bridge(model, slurmd_pods, access)

    def pod(name):
        return kube.get(POD, "jobs", name)

    def scheduled_message(name):
        return next((c.get("message", "") for c in pod(name)["status"].get("conditions", []) if c["type"] == "PodScheduled"), "")

    kube.create(member_manifest("train-0"))
    plan = sync()
    assert not plan.submit_groups and not control.placeholder_jobs(["svc-train"])
    assert scheduled_message("train-0") == "pod group train: 1 of 2 pods exist; its Slurm job is asked for once all do"

    kube.create(member_manifest("train-1"))
    assert [g.name for g in sync().submit_groups] == ["train"]
    wait_for(lambda: sync() is not None and all(pod(n)["spec"].get("nodeName") for n in ("train-0", "train-1")), 60,
             "both members bound")
    (job,) = control.placeholder_jobs(["svc-train"])
    assert {pod(n)["spec"]["nodeName"] for n in ("train-0", "train-1")} == {"node-a", "node-b"}
    allocation = control.job_allocation(job.job_id)
    found = kube.get(CONFIG_MAP, "hpc", placements_config_map_name("gang"))
    recorded = {p.name: (p.kubernetes_node, p.gpu_indices) for p in read_placements(found["data"])}
    assert recorded == {"train-0": ("node-a", allocation.nodes["gpu-0"].gpu_indices),
                        "train-1": ("node-b", allocation.nodes["gpu-1"].gpu_indices)}
    for node in NODES:
        assert cluster.run(node, ["test", "-e", f"{HOLD_DIR}/{job.job_id}"], check=False).returncode == 0
    writes = kube.writes
    assert sync().empty and kube.writes == writes  # settled

    # train-0 deleted (Terminating: no kubelet here): the job is cancelled and train-1 deleted too.
    control_plane.kubectl("delete", "pod", "train-0", "-n", "jobs", "--wait=false")
    plan = sync()
    assert plan.cancel == [job.job_id] and [p.name for p in plan.delete_pods] == ["train-1"], plan
    assert pod("train-1")["metadata"].get("deletionTimestamp")
    wait_for(lambda: control.job_allocation(job.job_id).state == "COMPLETING", 30, "the group's job completing")
    for name in ("train-0", "train-1"):
        control_plane.kubectl("delete", "pod", name, "-n", "jobs", "--grace-period=0", "--force")
    wait_for(lambda: sync() is not None and not control.placeholder_jobs(["svc-train"]), 60, "the group's job released")
    for node in NODES:
        assert cluster.run(node, ["ls", "-A", HOLD_DIR], check=False).stdout.strip() == ""
