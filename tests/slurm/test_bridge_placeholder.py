"""The placeholder job of a Slurm-scheduled pod (spec.bridge), on real Slurm 24.11.

A cluster rendered from a spec with the bridge on: namespace `inference` mapped to account
`serving`, user `svc-serving`, partition `gpu`; one 4-GPU node. The placeholder is submitted,
cancelled, held and released with the very commands the operator runs
(render/bridge/placeholder_job.py through SlurmControl), and shows what the bridge relies on:

- the job holds the pod's CPUs and GPUs, charged to the namespace's account, and
  `scontrol --details show job` names the GPU indices it holds;
- once cancelled, the job stays COMPLETING while its hold file exists: a job of alice's that
  needs those GPUs keeps waiting; when the hold is released, it starts on them;
- an ordinary job is not held by the bridge's Epilog, and no user can write a hold file.

The bridge's decision (reconcile/bridge_plan.py) reads the real squeue listing: it binds the
running job's pod, keeps the cancelled job held while its pod terminates, and releases it once
the pod is gone.

The last test needs a real API server too (the control plane of the k8s tier, started for
this session): pods with the bridge's schedulerName go through bridge_sync end to end, with
Slurm's commands run on the native hosts where the operator would exec into slurmd pods.
No kubelet runs there, so the slurmd pods' placement is given, a deleted bound pod stays
Terminating, and "the pod is gone" is a forced deletion.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from kubeslurm.ownership import CONFIG_MAP, POD, SLURM_CLUSTER
from kubeslurm.reconcile.bridge_plan import BridgedPod, BridgePlan, PlaceholderState, plan_bridge
from kubeslurm.reconcile.bridge_sync import BridgeAccess, sync_bridge
from kubeslurm.reconcile.events import EventRecorder
from kubeslurm.reconcile.kube_api import KubeApi, load_api_client
from kubeslurm.render.bridge.placeholder_job import HOLD_DIR, PlaceholderRequest, hold_argv, release_argv
from kubeslurm.render.bridge.placements import placements_config_map_name, read_placements
from testbed import REPO
from testbed.waiting import wait_for
from tests.slurm.conftest import running_with_accounts

from .test_scheduling_policies import Policies

pytestmark = pytest.mark.slurm

CLUSTER = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
    "metadata": {"name": "bridge", "namespace": "hpc"},
    "spec": {
        "accounting": {"enabled": True},
        "accounts": [
            {"name": "serving", "users": ["svc-serving"]},
            {"name": "vision", "users": ["alice"]},
        ],
        "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
        "bridge": {"enabled": True, "namespaces": [
            {"namespace": "inference", "account": "serving", "user": "svc-serving", "partition": "gpu"},
        ]},
    },
}
NODE_SETS = [{"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": "gpu", "namespace": "hpc"},
              "spec": {"clusterName": "bridge", "replicas": 1, "resources": {"cpu": "4", "memory": "4Gi"},
                       "gpus": {"count": 4, "type": "a100"}}}]
NODE = "gpu-0"
KUBERNETES_NODES = {NODE: "node-a"}  # where the slurmd pod gpu-0 would run


@pytest.fixture(scope="module")
def bridge(slurm_rootfs, request):
    with running_with_accounts(slurm_rootfs, request, [CLUSTER, *NODE_SETS], "bridge") as (model, node_sets, cluster, control):
        yield model, cluster, control


def placeholder_for(model, gpus: int) -> PlaceholderRequest:
    (mapping,) = model.spec.bridge.namespaces
    return PlaceholderRequest(
        namespace=mapping.namespace, pod_name="server-0", pod_uid=str(uuid.uuid4()),
        account=mapping.account, user=mapping.user, partition=mapping.partition,
        cpus=2, memory_mib=512, gpus=gpus)


def on_node(cluster, argv: list[str]) -> None:
    """What the operator runs in the slurmd container (as root, through the exec API)."""
    cluster.run(NODE, argv)


def test_the_placeholder_holds_its_gpus_until_the_pod_is_gone_even_after_scancel(bridge):
    model, cluster, control = bridge
    p = Policies(cluster)
    request = placeholder_for(model, gpus=2)
    pod = BridgedPod(request.namespace, request.pod_name, request.pod_uid)
    users = [request.user]
    job = control.submit_placeholder(request)
    wait_for(lambda: control.job_allocation(job).state == "RUNNING", 60, f"placeholder {job} running")
    assert control.placeholder_jobs(users) == [PlaceholderState(job, "RUNNING", request.pod_uid, (NODE,), "None")]
    plan = plan_bridge([pod], control.placeholder_jobs(users), KUBERNETES_NODES)
    assert [(b.job_id, b.slurm_nodes, b.kubernetes_node) for b in plan.bind] == [(job, (NODE,), "node-a")], plan
    allocation = control.job_allocation(job)
    assert list(allocation.nodes) == [NODE], allocation
    held = allocation.nodes[NODE]
    assert len(held.gpu_indices) == 2 and set(held.gpu_indices) <= {0, 1, 2, 3}, allocation
    assert (p.field(job, "Account"), p.field(job, "UserId").split("(")[0], p.field(job, "Partition")) == \
        ("serving", "svc-serving", "gpu")
    assert p.field(job, "NumCPUs") == "2", p.field(job, "NumCPUs")
    on_node(cluster, hold_argv(job))  # the operator, before it binds the pod

    # alice needs every GPU of the node: she waits while the placeholder holds two.
    wanted = p.sbatch("--gres=gpu:4 --wrap 'sleep 1'")
    p.wait_reason(wanted, "Resources")

    control.cancel_placeholder(job)  # the pod was deleted, or Slurm preempted the job
    wait_for(lambda: control.job_allocation(job).state == "COMPLETING", 30, f"placeholder {job} completing")
    terminating = BridgedPod(pod.namespace, pod.name, pod.uid, node_name="node-a", deleting=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # the pod is still terminating: nothing of its node is handed out
        assert control.job_allocation(job).state == "COMPLETING"
        assert p.field(wanted, "JobState") == "PENDING", p.field(wanted, "Reason")
        assert plan_bridge([terminating], control.placeholder_jobs(users), KUBERNETES_NODES) == BridgePlan()
        time.sleep(1)

    plan = plan_bridge([], control.placeholder_jobs(users), KUBERNETES_NODES)  # the pod is gone
    assert plan == BridgePlan(release=[(job, (NODE,))]), plan
    for node in plan.release[0][1]:
        cluster.run(node, release_argv(job))
    wait_for(lambda: control.job_allocation(wanted).state in ("RUNNING", "COMPLETING", "COMPLETED"), 90,
             f"alice's job {wanted} started once the pod's GPUs were released")
    p.wait_sacct(wanted, "COMPLETED", timeout=60)
    assert p.sacct(job, "State")[0].split()[0] == "CANCELLED"


def test_an_ordinary_job_is_not_held_and_no_user_can_write_a_hold(bridge):
    model, cluster, control = bridge
    p = Policies(cluster)
    job = p.sbatch("--gres=gpu:1 --wrap true")
    p.wait_sacct(job, "COMPLETED", timeout=60)
    wait_for(lambda: cluster.node_states().get(NODE) == "idle", 30, f"{NODE} idle after an ordinary job")
    forged = cluster.run(NODE, hold_argv("4242"), user="alice", check=False)
    assert forged.returncode != 0, forged


def bridged_pod_manifest(name: str, gpus: int, cpus: int = 1) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "inference"},
        "spec": {"schedulerName": "kubeslurm-bridge", "containers": [{
            "name": "server", "image": "registry.example/server:1",
            "resources": {"requests": {"cpu": str(cpus), "memory": "256Mi"}, "limits": {"kubeslurm.io/gpu": str(gpus)}}}]},
    }


def test_pods_get_jobs_are_bound_when_they_run_and_release_their_gpus_only_once_gone(bridge, control_plane):
    model, cluster, control = bridge
    control_plane.kubectl("create", "namespace", "inference", check=False)
    kube = KubeApi(load_api_client(str(control_plane.kubeconfig_path)))
    # The SlurmCluster as the API server has it: the placement record is owned by it (the
    # garbage collector would remove a record whose owner does not exist).
    control_plane.kubectl("create", "namespace", CLUSTER["metadata"]["namespace"], check=False)
    control_plane.apply_crds(REPO / "crds")
    stored = kube.get(SLURM_CLUSTER, "hpc", "bridge") or kube.create(CLUSTER)
    model = model.model_copy(update={"metadata": model.metadata.model_copy(update={"uid": stored["metadata"]["uid"]})})
    access = BridgeAccess(kube, control, lambda node, argv: cluster.run(node, argv, check=False), EventRecorder(kube))
    slurmd_pods = [{"metadata": {"name": NODE}, "spec": {"nodeName": "node-a"}}]

    def sync():
        return sync_bridge(model, slurmd_pods, access)

    def pod(name):
        return kube.get(POD, "inference", name)

    def recorded() -> dict[str, tuple[str, tuple[int, ...]]]:
        """The placement record the device plugin reads: pod name -> (node, GPU indices)."""
        found = kube.get(CONFIG_MAP, "hpc", placements_config_map_name("bridge"))
        return {p.name: (p.kubernetes_node, p.gpu_indices) for p in read_placements((found or {}).get("data"))}

    first = kube.create(bridged_pod_manifest("server-0", gpus=2))
    assert [p.name for p in sync().submit] == ["server-0"]
    wait_for(lambda: sync() and (pod("server-0")["spec"].get("nodeName") == "node-a"), 60, "server-0 bound to node-a")
    (job,) = [j for j in control.placeholder_jobs(["svc-serving"]) if j.pod_uid == first["metadata"]["uid"]]
    assert cluster.run(NODE, ["test", "-e", f"{HOLD_DIR}/{job.job_id}"], check=False).returncode == 0
    indices = control.job_allocation(job.job_id).nodes[NODE].gpu_indices
    assert len(indices) == 2
    assert recorded() == {"server-0": ("node-a", indices)}  # written before the Binding
    assert {e for e in _events(control_plane, "server-0") if e[1] != "SlurmPending"} == {
        ("Normal", "SlurmJobSubmitted",
         f"Slurm job {job.job_id} asks for 1 CPUs, 256 MiB and 2 GPUs as svc-serving, account serving"),
        ("Normal", "BoundBySlurm", f"Slurm job {job.job_id} runs on {NODE}: bound to node node-a, GPUs {{'{NODE}': {list(indices)}}}"),
    }

    # server-1 needs all 4 GPUs: it waits, and says why
    second = kube.create(bridged_pod_manifest("server-1", gpus=4))
    wait_for(lambda: sync() and "pending: Resources" in _scheduled_message(pod("server-1")), 60, "server-1 shows Slurm's reason")
    pending = f"Slurm job {_job_of(control, second)} pending: Resources"
    assert _scheduled_message(pod("server-1")) == pending
    assert ("Normal", "SlurmPending", pending) in _events(control_plane, "server-1")  # what `kubectl describe pod` shows
    writes = kube.writes
    assert sync().empty and kube.writes == writes  # settled: the next pass writes nothing

    # server-0 is deleted; without a kubelet it stays Terminating: its job ends, its GPUs stay held
    control_plane.kubectl("delete", "pod", "server-0", "-n", "inference", "--wait=false")
    assert sync().cancel == [job.job_id]
    wait_for(lambda: control.job_allocation(job.job_id).state == "COMPLETING", 30, "server-0's job completing")
    for _ in range(5):
        assert sync().empty
        assert not pod("server-1")["spec"].get("nodeName")
    control_plane.kubectl("delete", "pod", "server-0", "-n", "inference", "--grace-period=0", "--force")  # gone
    wait_for(lambda: sync() is not None and pod("server-1")["spec"].get("nodeName") == "node-a", 90,
             "server-1 bound once server-0 was gone")
    (later,) = [j for j in control.placeholder_jobs(["svc-serving"]) if j.pod_uid == second["metadata"]["uid"]]
    assert control.job_allocation(later.job_id).nodes[NODE].gpu_indices == (0, 1, 2, 3)
    assert recorded() == {"server-1": ("node-a", (0, 1, 2, 3))}  # server-0's entry went with it

    # server-1's job is ended on Slurm's side (an admin's scancel, or preemption): the bridge deletes the pod
    control.cancel_placeholder(later.job_id)
    wait_for(lambda: sync() is not None and pod("server-1")["metadata"].get("deletionTimestamp"), 30, "server-1 deleted")
    assert ("Warning", "DeletedForSlurm", "its Slurm job no longer runs (ended, preempted or cancelled): "
            "a pod Slurm placed runs only while its job does") in _events(control_plane, "server-1")
    assert control.job_allocation(later.job_id).state == "COMPLETING"  # held while the pod terminates
    control_plane.kubectl("delete", "pod", "server-1", "-n", "inference", "--grace-period=0", "--force")
    wait_for(lambda: sync() is not None and not control.placeholder_jobs(["svc-serving"]), 60, "every placeholder gone")
    assert recorded() == {}
    assert cluster.run(NODE, ["ls", "-A", HOLD_DIR]).stdout.strip() == ""

    # A pod no node of the partition can hold: sbatch refuses it; the pod says why, the pass
    # does not fail (the cluster is not Degraded by one pod), and asking again writes nothing.
    kube.create(bridged_pod_manifest("too-big", gpus=0, cpus=512))
    assert sync().submit and "not scheduled by Slurm: sbatch: error: " in _scheduled_message(pod("too-big"))
    refused = [e for e in _events(control_plane, "too-big") if e[1] == "SlurmRefused"]
    assert len(refused) == 1 and refused[0][0] == "Warning" and refused[0][2] == _scheduled_message(pod("too-big")), refused
    writes = kube.writes
    assert sync().submit and kube.writes == writes and not control.placeholder_jobs(["svc-serving"])


def _job_of(control, pod: dict) -> str:
    (job,) = [j for j in control.placeholder_jobs(["svc-serving"]) if j.pod_uid == pod["metadata"]["uid"]]
    return job.job_id


def _events(control_plane, pod_name: str) -> set[tuple[str, str, str]]:
    out = control_plane.kubectl("get", "events", "-n", "inference", "-o", "json",
                                "--field-selector", f"involvedObject.name={pod_name}").stdout
    return {(e["type"], e["reason"], e["message"]) for e in json.loads(out)["items"]}


def _scheduled_message(pod: dict) -> str:
    return next((c.get("message", "") for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), "")
