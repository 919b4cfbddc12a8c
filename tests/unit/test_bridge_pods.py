"""A Slurm-scheduled pod read by the bridge (reconcile/bridge_pods.py): its state and its job's size."""

import pytest

from kubeslurm.api.bridge import BridgedNamespace
from kubeslurm.reconcile.bridge_plan import BridgedPod, PodGroup
from kubeslurm.reconcile.bridge_pods import bridged_pod, placeholder_request
from kubeslurm.reconcile.bridge_sync import group_request

MAPPING = BridgedNamespace(namespace="inference", account="serving", user="svc-serving", partition="gpu")
UID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def pod(containers, init=(), **extra):
    return {"metadata": {"namespace": "inference", "name": "server-0", "uid": UID, **extra.get("metadata", {})},
            "spec": {"schedulerName": "kubeslurm-research", "containers": list(containers),
                     "initContainers": list(init), **extra.get("spec", {})},
            "status": extra.get("status", {"phase": "Pending"})}


def container(requests=None, limits=None):
    return {"name": "c", "image": "x", "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}


@pytest.mark.parametrize(
    "containers,init,expected",
    [
        ([container({"cpu": "2", "memory": "4Gi"})], [], (2, 4096, 0)),
        ([container({"cpu": "500m", "memory": "100M"})], [], (1, 96, 0)),  # rounded up: whole CPUs, MiB
        ([container({"cpu": "1", "memory": "1Gi"}), container({"cpu": "1500m", "memory": "512Mi"})], [], (3, 1536, 0)),
        ([container({"memory": "1Gi"}, {"kubeslurm.io/gpu": "2"})], [], (1, 1024, 2)),  # GPUs as limits only
        ([container({"cpu": "1", "memory": "1Gi"})], [container({"cpu": "4", "memory": "256Mi"})], (4, 1024, 0)),
    ],
)
def test_the_job_asks_for_what_the_kubelet_reserves(containers, init, expected):
    request = placeholder_request(pod(containers, init), MAPPING)
    assert (request.cpus, request.memory_mib, request.gpus) == expected
    assert (request.account, request.user, request.partition, request.qos, request.pod_uid) == \
        ("serving", "svc-serving", "gpu", None, UID)


def test_a_pod_without_memory_is_shown_why_and_not_submitted():
    seen = bridged_pod(pod([container({"cpu": "1"})]), MAPPING)
    assert seen.problem == "not scheduled by Slurm: set resources.requests.memory on the pod's containers: " \
                           "Slurm allocates memory per job"


@pytest.mark.parametrize(
    "extra,expected",
    [
        ({}, BridgedPod("inference", "server-0", UID)),
        ({"spec": {"nodeName": "node-a"}, "status": {"phase": "Pending"}},
         BridgedPod("inference", "server-0", UID, node_name="node-a")),
        ({"spec": {"nodeName": "node-a"}, "status": {"phase": "Pending", "containerStatuses": [
            {"name": "server", "state": {"waiting": {"reason": "ContainerCreating"}}}]}},
         BridgedPod("inference", "server-0", UID, node_name="node-a", admitted=True)),
        ({"spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}},
         BridgedPod("inference", "server-0", UID, node_name="node-a", admitted=True)),
        ({"metadata": {"deletionTimestamp": "2026-12-03T17:00:00Z"}, "spec": {"nodeName": "node-a"},
          "status": {"phase": "Running"}},
         BridgedPod("inference", "server-0", UID, node_name="node-a", deleting=True, admitted=True)),
        ({"spec": {"nodeName": "node-a"}, "status": {"phase": "Failed"}},
         BridgedPod("inference", "server-0", UID, node_name="node-a", finished=True, admitted=True)),
        ({"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SlurmPending", "message": "Slurm job 7 pending: Resources"}]}},
         BridgedPod("inference", "server-0", UID, pending_message="Slurm job 7 pending: Resources")),
    ],
)
def test_the_pods_state(extra, expected):
    assert bridged_pod(pod([container({"memory": "1Gi"})], **extra), MAPPING) == expected


def test_a_gpu_pod_says_how_many_it_asks_for():
    assert bridged_pod(pod([container({"memory": "1Gi"}, {"kubeslurm.io/gpu": "2"})]), MAPPING).gpus == 2


def grouped(labels=None, annotations=None, requests=None, uid=UID, name="train-0"):
    return pod([container(requests or {"cpu": "2", "memory": "1Gi"})],
               metadata={"labels": labels or {}, "annotations": annotations or {}, "uid": uid, "name": name})


GROUP_LABEL = {"kubeslurm.io/pod-group": "train"}
SIZE_2 = {"kubeslurm.io/pod-group-size": "2"}


def test_a_pod_group_member_says_its_group_and_size():
    seen = bridged_pod(grouped(GROUP_LABEL, SIZE_2), MAPPING)
    assert (seen.group, seen.group_size, seen.problem) == ("train", 2, None)
    assert bridged_pod(grouped(), MAPPING).group is None


@pytest.mark.parametrize("labels,annotations,problem", [
    (GROUP_LABEL, {}, "a pod of group train needs annotation kubeslurm.io/pod-group-size: the number of pods in the "
                      "group, 1 to 64 (it is '')"),
    (GROUP_LABEL, {"kubeslurm.io/pod-group-size": "65"}, "1 to 64 (it is '65')"),
    (GROUP_LABEL, {"kubeslurm.io/pod-group-size": "two"}, "(it is 'two')"),
    ({"kubeslurm.io/pod-group": "Train_1"}, SIZE_2, "label kubeslurm.io/pod-group='Train_1' must be a DNS label"),
])
def test_a_bad_group_label_or_size_is_shown_and_not_submitted(labels, annotations, problem):
    seen = bridged_pod(grouped(labels, annotations), MAPPING)
    assert seen.problem.startswith("not scheduled by Slurm: ") and problem in seen.problem, seen.problem
    assert seen.group is None


def test_a_groups_job_is_each_members_resources_on_a_node_of_its_own():
    second = "1f8fad5b-d9cb-469f-a165-70867728950e"
    raw = {UID: grouped(GROUP_LABEL, SIZE_2), second: grouped(GROUP_LABEL, SIZE_2, uid=second, name="train-1")}
    members = tuple(bridged_pod(p, MAPPING) for p in raw.values())
    request = group_request(PodGroup("inference", "train", members), raw, MAPPING, bridged_nodes_only=True)
    assert (request.group, request.group_uids, request.cpus, request.memory_mib, request.bridged_nodes_only) == \
        ("train", (UID, second), 2, 1024, True)
    raw[second] = grouped(GROUP_LABEL, SIZE_2, {"cpu": "4", "memory": "1Gi"}, uid=second, name="train-1")
    with pytest.raises(ValueError, match=r"ask for different resources \(2 CPUs, 1024 MiB, 0 GPUs; 4 CPUs, 1024 MiB"):
        group_request(PodGroup("inference", "train", members), raw, MAPPING)
