"""Trouble seen from Kubernetes (node state, listed conditions, drain-reason annotations) drains
Slurm nodes; only drains written for that trouble are resumed."""

import pytest

from kubeslurm.api.node_health import NodeCondition
from kubeslurm.reconcile.node_health import HealthActions, health_actions, one_line
from kubeslurm.reconcile.slurm_control import SlurmNode

GPU_PROBLEM = NodeCondition(type="GPUProblem")
DRAIN = "kubeslurm.io/drain-reason"


def k8s_node(name="k1", ready=True, cordoned=False, conditions=(), annotations=None):
    return {
        "metadata": {"name": name, **({"annotations": annotations} if annotations is not None else {})},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}, *conditions]},
    }


def pod(name="h100-0", node="k1", annotations=None, ready=True):
    return {"metadata": {"name": name, **({"annotations": annotations} if annotations is not None else {})},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": "Running" if ready else "Pending",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def idle(name="h100-0"):
    return SlurmNode(name, {"IDLE"})


def drained(reason, name="h100-0"):
    return SlurmNode(name, {"IDLE", "DRAIN"}, reason=reason)


GPU_BAD = {"type": "GPUProblem", "status": "True", "reason": "XidError", "message": "GPU 3 fell off the bus\nXid 79"}
GPU_OK = {"type": "GPUProblem", "status": "False", "reason": "NoProblem", "message": "fine"}


@pytest.mark.parametrize(
    "node,the_pod,slurm,conditions,expected",
    [
        # NotReady and cordoned drain, always.
        (k8s_node(ready=False), pod(), idle(), (), HealthActions({"h100-0": "kubernetes node k1 is not Ready"}, [])),
        (k8s_node(cordoned=True), pod(), idle(), (), HealthActions({"h100-0": "kubernetes node k1 is cordoned"}, [])),
        # A listed condition drains with its message (first line); unlisted or another status do not.
        (k8s_node(conditions=[GPU_BAD]), pod(), idle(), [GPU_PROBLEM],
         HealthActions({"h100-0": "kubernetes node k1 has GPUProblem=True: GPU 3 fell off the bus"}, [])),
        (k8s_node(conditions=[GPU_BAD]), pod(), idle(), (), HealthActions({}, [])),
        (k8s_node(conditions=[GPU_OK]), pod(), idle(), [GPU_PROBLEM], HealthActions({}, [])),
        (k8s_node(conditions=[GPU_OK]), pod(), idle(), [NodeCondition(type="GPUProblem", status="False")],
         HealthActions({"h100-0": "kubernetes node k1 has GPUProblem=False: fine"}, [])),
        # The annotation on the Kubernetes node or on the pod.
        (k8s_node(annotations={DRAIN: "firmware update tonight"}), pod(), idle(), (),
         HealthActions({"h100-0": "kubernetes node k1 kubeslurm.io/drain-reason: firmware update tonight"}, [])),
        (k8s_node(), pod(annotations={DRAIN: "bad NVLink\x1b[31m"}), idle(), (),
         HealthActions({"h100-0": "pod h100-0 kubeslurm.io/drain-reason: bad NVLink [31m"}, [])),
        (k8s_node(), pod(annotations={DRAIN: ""}), idle(), (),
         HealthActions({"h100-0": "pod h100-0 kubeslurm.io/drain-reason: no reason given"}, [])),
        # Trouble gone: our drains resume, whichever kind wrote them.
        (k8s_node(), pod(), drained("kubeslurm: kubernetes node k1 is not Ready"), (), HealthActions({}, ["h100-0"])),
        (k8s_node(conditions=[GPU_OK]), pod(), drained("kubeslurm: kubernetes node k1 has GPUProblem=True: x"), [GPU_PROBLEM],
         HealthActions({}, ["h100-0"])),
        (k8s_node(), pod(), drained("kubeslurm: pod h100-0 kubeslurm.io/drain-reason: bad NVLink"), (), HealthActions({}, ["h100-0"])),
        # ... but only once the pod is Ready: a replaced pod still Pending has no node to judge.
        (k8s_node(), pod(node=None, ready=False), drained("kubeslurm: kubernetes node k9 has GPUProblem=True: x"), [GPU_PROBLEM],
         HealthActions({}, [])),
        (k8s_node(), pod(ready=False), drained("kubeslurm: kubernetes node k1 is not Ready"), (), HealthActions({}, [])),
        # Still troubled, same reason: nothing to do (a no-op reconcile writes nothing).
        (k8s_node(annotations={DRAIN: "x"}), pod(), drained("kubeslurm: kubernetes node k1 kubeslurm.io/drain-reason: x"), (),
         HealthActions({}, [])),
        # Our drain, other trouble now: drained again with the current reason.
        (k8s_node(cordoned=True), pod(), drained("kubeslurm: kubernetes node k1 is not Ready"), (),
         HealthActions({"h100-0": "kubernetes node k1 is cordoned"}, [])),
        # Drains that are not ours for Kubernetes trouble: never resumed, never overwritten.
        (k8s_node(), pod(), drained("replacing a fan"), (), HealthActions({}, [])),
        (k8s_node(ready=False), pod(), drained("replacing a fan"), (), HealthActions({}, [])),
        (k8s_node(), pod(), drained("kubeslurm: scale-down of NodeSet h100 to 0"), (), HealthActions({}, [])),
        (k8s_node(), pod(), drained("kubeslurm: health check: 1 GPU device files"), (), HealthActions({}, [])),
        (k8s_node(annotations={DRAIN: "x"}), pod(), drained("kubeslurm: health check: 1 GPU device files"), (), HealthActions({}, [])),
    ],
)
def test_health_actions(node, the_pod, slurm, conditions, expected):
    assert health_actions([the_pod], {"k1": node}, {slurm.name: slurm}, conditions) == expected


def test_only_pods_with_a_slurm_node_and_their_own_kubernetes_node_count():
    pods = [pod("h100-0", "k1"), pod("h100-1", "k2"), pod("h100-2", "k3")]
    nodes = {"k1": k8s_node("k1"), "k2": k8s_node("k2", ready=False)}
    slurm = {"h100-0": idle("h100-0"), "h100-1": idle("h100-1")}
    assert health_actions(pods, nodes, slurm) == HealthActions({"h100-1": "kubernetes node k2 is not Ready"}, [])


@pytest.mark.parametrize("text,expected", [
    ("ok", "ok"), ("two\nlines", "two"), ("tab\there", "tab here"), ("x" * 300, "x" * 200), ("\n", ""),
])
def test_outside_text_becomes_one_printable_line(text, expected):
    assert one_line(text) == expected
