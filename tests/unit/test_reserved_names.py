"""The models' reserved names and paths follow what render actually creates.

The API models cannot import render (render depends on them), so the lists of reserved
NodeSet names, podTemplate volume names, mount paths and env names are written in api/;
these tests fail when render starts using a name the lists do not cover.
"""

import re

from kubeslurm.api.node_set import RESERVED_NODE_SET_SUFFIXES
from kubeslurm.api.pod_template import (
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIX,
    RESERVED_MOUNT_PATHS,
    RESERVED_VOLUME_NAMES,
    mount_path_problem,
)
from kubeslurm.cli import kubernetes_objects_offline
from kubeslurm.render.k8s import labels
from kubeslurm.render.k8s.name_collisions import cluster_derived_names, name_collisions

from .manifests import contract_documents, load_with_uids, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
NAMESPACED_KINDS = ("ConfigMap", "Secret", "Service", "PersistentVolumeClaim", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy")
EVERYTHING_ON = set_path(set_path(CLUSTER, "spec.controller.backup", True), "spec.login.replicas", 16)


def test_every_name_a_cluster_derives_is_reserved_for_node_sets():
    for derived in cluster_derived_names("research"):
        if not derived.name.startswith("research-"):
            assert derived.name == "data-research-mariadb-0", derived  # a claim: NodeSets make none
            continue
        suffix = derived.name.removeprefix("research-")
        assert suffix in RESERVED_NODE_SET_SUFFIXES, derived
        # a NodeSet named like the pod's StatefulSet would have a pod of this name
        ordinal = re.fullmatch(r"(.*)-[0-9]+", suffix)
        if ordinal:
            assert ordinal[1] in RESERVED_NODE_SET_SUFFIXES, derived


def test_every_object_and_pod_render_creates_is_a_derived_name():
    cluster, node_sets = load_with_uids(EVERYTHING_ON, GPU_NODES, CPU_NODES)
    derived = {d.name for d in cluster_derived_names("research")}
    for obj in kubernetes_objects_offline(cluster, node_sets):
        name = obj["metadata"]["name"]
        if obj["kind"] not in NAMESPACED_KINDS or labels.NODE_SET in obj["metadata"].get("labels", {}):
            continue  # a NodeSet's own objects: node_set_derived_names
        assert name in derived, f"{obj['kind']} {name}"
        if obj["kind"] == "StatefulSet":
            for ordinal in range(obj["spec"]["replicas"]):
                assert f"{name}-{ordinal}" in derived, f"pod {name}-{ordinal}"
        if obj["kind"] == "Service" and obj["spec"].get("selector", {}).get("statefulset.kubernetes.io/pod-name"):
            assert obj["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] in derived


def test_the_slurmd_pod_uses_only_reserved_volume_names_mount_paths_and_env_names():
    cluster, node_sets = load_with_uids(EVERYTHING_ON, GPU_NODES, CPU_NODES)
    [statefulset] = [o for o in kubernetes_objects_offline(cluster, node_sets)
                     if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "h100"]
    pod = statefulset["spec"]["template"]["spec"]
    assert {v["name"] for v in pod["volumes"]} <= set(RESERVED_VOLUME_NAMES)
    for container in pod["initContainers"] + pod["containers"]:
        for mount in container["volumeMounts"]:
            assert mount["mountPath"] in RESERVED_MOUNT_PATHS or mount_path_problem(mount["mountPath"]), mount
        for env in container.get("env", []):
            assert env["name"] in RESERVED_ENV_NAMES or env["name"].startswith(RESERVED_ENV_PREFIX), env


def test_the_contract_manifest_has_no_collisions():
    cluster, node_sets = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    assert name_collisions(cluster, node_sets) == []
    assert name_collisions(cluster, node_sets, [cluster, *node_sets]) == []


def test_a_collision_names_the_object_and_field_to_change():
    other = {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "other", "namespace": "hpc"}}
    taker = set_path(set_path(CPU_NODES, "metadata.name", "other-controller-0"), "spec.clusterName", "research")
    cluster, node_sets = load_with_uids(CLUSTER, GPU_NODES, taker)
    other_cluster, _ = load_with_uids(other)
    [error] = name_collisions(cluster, node_sets, [other_cluster])
    assert (error.obj, error.field) == ("NodeSet hpc/other-controller-0", "metadata.name")
    assert "controller pod 0 of SlurmCluster other" in error.message
    # another namespace shares no names
    elsewhere = other_cluster.model_copy(update={"metadata": other_cluster.metadata.model_copy(update={"namespace": "x"})})
    assert name_collisions(cluster, node_sets, [elsewhere]) == []
