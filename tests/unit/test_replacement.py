"""replaceUnhealthy: which pods are deleted, and which Kubernetes nodes new pods avoid."""

import pytest

from kubeslurm.api.node_health import NodeCondition
from kubeslurm.reconcile.replacement import avoided_nodes, replacements
from kubeslurm.reconcile.slurm_control import SlurmJob, SlurmNode

from kubeslurm.render.cluster_objects import desired_objects, node_set_objects

from .manifests import contract_documents, load_with_uids, set_path
from .test_objects_slurmd import template_of

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
CHECK = "kubeslurm: health check: 1 GPU device files (/dev/nvidia0) but the node registered 2 GPUs (Gres=gpu:h100:2)"
CONDITION = "kubeslurm: kubernetes node k1 has GPUProblem=True: Xid 79"


def pod(name="h100-0", node_set="h100", ready=True, terminating=False):
    return {"metadata": {"name": name, "labels": {"kubeslurm.io/nodeset": node_set},
                         **({"deletionTimestamp": "2026-12-03T16:00:00Z"} if terminating else {})},
            "spec": {"nodeName": "k1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def slurm(reason="", *states, name="h100-0"):
    return {name: SlurmNode(name, set(states or ({"IDLE", "DRAIN"} if reason else {"IDLE"})), reason=reason)}


JOB = SlurmJob("7", "RUNNING", 0, ("h100-0",))


@pytest.mark.parametrize(
    "the_pod,nodes,jobs,expected",
    [
        # Drained by the check or for its Kubernetes node's reported trouble or cordon, idle: replaced.
        (pod(), slurm(CHECK), [], {"h100-0": CHECK.removeprefix("kubeslurm: ")}),
        (pod(), slurm(CONDITION), [], {"h100-0": CONDITION.removeprefix("kubeslurm: ")}),
        (pod(), slurm("kubeslurm: kubernetes node k1 kubeslurm.io/drain-reason: RMA"), [],
         {"h100-0": "kubernetes node k1 kubeslurm.io/drain-reason: RMA"}),
        (pod(), slurm("kubeslurm: kubernetes node k1 is cordoned"), [], {"h100-0": "kubernetes node k1 is cordoned"}),
        # A job still on it (draining), or completing: wait.
        (pod(), slurm(CHECK, "MIXED", "DRAIN"), [JOB], {}),
        (pod(), slurm(CHECK, "IDLE", "DRAIN", "COMPLETING"), [], {}),
        (pod(), slurm(CHECK), [JOB], {}),
        # Being replaced already: DOWN by its preStop hook, terminating, or the new pod not Ready yet.
        (pod(), slurm(CHECK, "DOWN", "DRAIN"), [], {}),
        (pod(terminating=True), slurm(CHECK), [], {}),
        (pod(ready=False), slurm(CHECK), [], {}),
        # Not a health drain, or not one that a new pod helps: never.
        (pod(), slurm("replacing a fan"), [], {}),
        (pod(), slurm("kubeslurm: scale-down of NodeSet h100 to 0"), [], {}),
        (pod(), slurm("kubeslurm: pod h100-0 kubeslurm.io/drain-reason: hold"), [], {}),
        (pod(), slurm("kubeslurm: kubernetes node k1 is not Ready"), [], {}),
        (pod(), slurm(), [], {}),
        # A NodeSet without replaceUnhealthy.
        (pod(node_set="cpu"), slurm(CHECK), [], {}),
    ],
)
def test_replacements(the_pod, nodes, jobs, expected):
    assert replacements([the_pod], nodes, jobs, {"h100"}) == expected


def k8s_node(name, conditions=(), annotations=None, cordoned=False):
    return {"metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, *conditions]}}


def test_new_pods_avoid_nodes_with_reported_trouble_only():
    nodes = {
        "k1": k8s_node("k1", [{"type": "GPUProblem", "status": "True"}]),
        "k2": k8s_node("k2", annotations={"kubeslurm.io/drain-reason": "RMA"}),
        "k3": k8s_node("k3", cordoned=True),  # the scheduler keeps pods off it anyway
        "k4": k8s_node("k4", [{"type": "GPUProblem", "status": "False"}]),
    }
    assert avoided_nodes(nodes, [NodeCondition(type="GPUProblem")]) == ["k1", "k2"]
    assert avoided_nodes(nodes, []) == ["k2"]


REPLACING = set_path(GPU_NODES, "spec.replaceUnhealthy", True)
ZONE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
]}}}
EXCLUDED = {"key": "metadata.name", "operator": "NotIn", "values": ["k1", "k2"]}


@pytest.mark.parametrize("node_set_doc,terms", [
    # No affinity of its own: one term, the exclusion.
    (REPLACING, [{"matchFields": [EXCLUDED]}]),
    # The site's terms are ORed: the exclusion goes into each.
    (set_path(REPLACING, "spec.affinity", ZONE_AFFINITY), [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}], "matchFields": [EXCLUDED]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}], "matchFields": [EXCLUDED]},
    ]),
])
def test_the_pod_template_excludes_avoided_nodes_in_every_term(node_set_doc, terms):
    cluster, [node_set] = load_with_uids(CLUSTER, node_set_doc)
    [stateful_set] = [o for o in node_set_objects(cluster, node_set, avoided_nodes=["k2", "k1"]) if o["kind"] == "StatefulSet"]
    affinity = stateful_set["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == terms
    assert stateful_set["spec"]["template"]["metadata"]["annotations"]["kubeslurm.io/avoided-nodes"] == "k1,k2"
    # Without avoided nodes: no exclusion, and an empty annotation (its change is what makes the
    # apply step write the template without the exclusion).
    assert "affinity" not in template_of(REPLACING)["spec"]
    assert template_of(REPLACING)["metadata"]["annotations"]["kubeslurm.io/avoided-nodes"] == ""
    assert "kubeslurm.io/avoided-nodes" not in template_of(GPU_NODES)["metadata"].get("annotations", {})


def test_only_node_sets_that_replace_keep_off_avoided_nodes():
    cluster, node_sets = load_with_uids(CLUSTER, REPLACING, CPU_NODES)
    objects = desired_objects(cluster, node_sets, database_password="x", config_hash_key=b"k" * 32, avoided_nodes=["k1"])
    templates = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] == "StatefulSet"}
    assert "affinity" in templates["h100"] and "affinity" not in templates["cpu"]
