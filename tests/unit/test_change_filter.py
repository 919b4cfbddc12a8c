"""Which kopf events wake a reconcile (reconcile/change_filter.py, wired in reconcile/handlers.py)."""

from __future__ import annotations

import copy

import pytest

from kubeslurm.reconcile import handlers
from kubeslurm.reconcile.change_filter import ChangeFilter, custom_resource_digest, kubernetes_node_digest

NODE_SET = {
    "apiVersion": "slurm.kubeslurm.io/v1alpha1", "kind": "NodeSet",
    "metadata": {"name": "h100", "namespace": "hpc", "uid": "u-1", "generation": 3, "resourceVersion": "100",
                 "labels": {"team": "a"}, "annotations": {"note": "x"}},
    "spec": {"clusterName": "research", "replicas": 2},
    "status": {"replicas": 2, "readyReplicas": 1},
}

NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "gpu-1", "uid": "n-1", "resourceVersion": "7", "labels": {"zone": "a"}, "annotations": {}},
    "spec": {"podCIDR": "10.0.1.0/24"},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": "2026-12-06T09:00:00Z", "lastTransitionTime": "2026-12-05T09:00:00Z"},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "",
             "lastHeartbeatTime": "2026-12-06T09:00:00Z", "lastTransitionTime": "2026-12-05T09:00:00Z"},
        ],
        "allocatable": {"cpu": "8", "nvidia.com/gpu": "8"},
        "images": [{"names": ["slurm:1"], "sizeBytes": 1}],
        "volumesInUse": [],
    },
}


def changed(base: dict, path: str, value) -> dict:
    """base with the value at a dotted path (list items by index) replaced."""
    body = copy.deepcopy(base)
    *parents, last = path.split(".")
    target = body
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return body


@pytest.mark.parametrize("path, value, wakes", [
    # the operator's own writes: nothing a reconcile reads
    ("status.readyReplicas", 2, False),
    ("metadata.resourceVersion", "101", False),
    ("metadata.managedFields", [{"manager": "kubeslurm"}], False),
    # what its owner changes
    ("metadata.generation", 4, True),  # spec.replicas (kubectl scale), any spec edit
    ("metadata.labels", {"team": "b"}, True),
    ("metadata.annotations", {"note": "y"}, True),
    ("metadata.finalizers", ["kubeslurm.io/finalizer"], True),
    ("metadata.deletionTimestamp", "2026-12-06T09:00:00Z", True),
])
def test_a_node_set_or_cluster_event_wakes_only_when_its_owner_changed_something(path, value, wakes):
    seen = ChangeFilter(custom_resource_digest)
    assert seen.changed(None, NODE_SET)  # the first sight (kopf's listing) always wakes
    assert not seen.changed("MODIFIED", copy.deepcopy(NODE_SET))
    assert seen.changed("MODIFIED", changed(NODE_SET, path, value)) is wakes


@pytest.mark.parametrize("path, value, wakes", [
    # a kubelet's periodic status
    ("status.conditions.0.lastHeartbeatTime", "2026-12-06T09:05:00Z", False),
    ("status.images", [{"names": ["slurm:2"], "sizeBytes": 2}], False),
    ("status.volumesInUse", ["kubernetes.io/csi/x"], False),
    ("metadata.resourceVersion", "8", False),
    # what decides drains, replacement and bridged NodeSets
    ("spec.unschedulable", True, True),
    ("spec.taints", [{"key": "gpu", "effect": "NoSchedule"}], True),
    ("status.conditions.0.status", "False", True),
    ("status.conditions.1.status", "True", True),  # a listed condition (spec.nodeHealth)
    ("status.conditions.1.message", "memory is low", True),  # part of the drain reason
    ("metadata.annotations", {"kubeslurm.io/drain": "bad fan"}, True),
    ("metadata.labels", {"zone": "b"}, True),
    ("status.allocatable", {"cpu": "8", "nvidia.com/gpu": "7"}, True),
])
def test_a_kubernetes_node_event_wakes_only_when_what_the_reconcile_reads_changed(path, value, wakes):
    seen = ChangeFilter(kubernetes_node_digest)
    assert seen.changed(None, NODE)
    assert seen.changed("MODIFIED", changed(NODE, path, value)) is wakes


def test_conditions_in_another_order_are_the_same_node():
    seen = ChangeFilter(kubernetes_node_digest)
    seen.changed(None, NODE)
    reordered = copy.deepcopy(NODE)
    reordered["status"]["conditions"].reverse()
    assert not seen.changed("MODIFIED", reordered)


def test_a_deletion_always_wakes_and_an_object_made_again_is_new():
    seen = ChangeFilter(custom_resource_digest)
    seen.changed(None, NODE_SET)
    assert seen.changed("DELETED", NODE_SET)
    assert len(seen) == 0  # nothing is kept of a deleted object
    assert seen.changed("ADDED", NODE_SET)  # same name and uid seen again after its deletion: woken
    again = changed(NODE_SET, "metadata.uid", "u-2")
    assert seen.changed("ADDED", again)  # another object of the same name


class Runtime:
    """handlers.RUNTIME's nudging part: which clusters were woken."""

    def __init__(self):
        self.nudged: list[tuple[str, str]] = []
        self.api = self

    def nudge(self, namespace, name):
        self.nudged.append((namespace, name))

    def get(self, kind, namespace, name):  # the NodeSet's cluster exists
        return {"metadata": {"name": name, "namespace": namespace}}


def test_the_handlers_wake_on_a_spec_change_and_not_on_the_operator_s_own_status_write(monkeypatch):
    runtime = Runtime()
    monkeypatch.setattr(handlers, "RUNTIME", runtime)
    monkeypatch.setattr(handlers, "NODE_SET_CHANGES", ChangeFilter(custom_resource_digest))
    monkeypatch.setattr(handlers, "CLUSTER_CHANGES", ChangeFilter(custom_resource_digest))

    def node_set_event(type_, body):
        handlers.node_set_changed(namespace="hpc", spec=body["spec"], body=body, type=type_)

    node_set_event(None, NODE_SET)
    node_set_event("MODIFIED", changed(NODE_SET, "status.readyReplicas", 2))
    node_set_event("MODIFIED", changed(changed(NODE_SET, "spec.replicas", 5), "metadata.generation", 4))
    cluster = {"metadata": {"name": "research", "namespace": "hpc", "uid": "c-1", "generation": 1}, "status": {}}
    handlers.cluster_changed(namespace="hpc", name="research", body=cluster, type=None)
    handlers.cluster_changed(namespace="hpc", name="research", body=changed(cluster, "status.phase", "Ready"),
                             type="MODIFIED")
    assert runtime.nudged == [("hpc", "research")] * 3


def test_a_kubelet_heartbeat_wakes_no_cluster_and_a_cordon_wakes_every_one(monkeypatch):
    runtime = handlers.Runtime()
    monkeypatch.setattr(handlers, "RUNTIME", runtime)
    monkeypatch.setattr(handlers, "KUBERNETES_NODE_CHANGES", ChangeFilter(kubernetes_node_digest))
    clusters = [runtime.wakeup("hpc", "research"), runtime.wakeup("lab", "teaching")]
    handlers.kubernetes_node_changed(body=NODE, type=None)
    assert all(c.is_set() for c in clusters)
    for c in clusters:
        c.clear()
    handlers.kubernetes_node_changed(body=changed(NODE, "status.conditions.0.lastHeartbeatTime", "2026-12-06T09:05:00Z"),
                                     type="MODIFIED")
    assert not any(c.is_set() for c in clusters)
    handlers.kubernetes_node_changed(body=changed(NODE, "spec.unschedulable", True), type="MODIFIED")
    assert all(c.is_set() for c in clusters)
