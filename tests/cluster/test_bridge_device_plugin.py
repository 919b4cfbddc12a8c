"""The kubeslurm device plugin (device_plugin/server.py) with the real kubelet and containerd of
the local cluster: registered on a node beside the fake GPU plugin, over the same fake GPUs
(c 195 N), reading the placement record from the real API server. A pod placed as the operator
places it (record entry first, then the Binding) gets exactly the GPUs of its entry, under their
own names; a pod bound to the node without an entry fails admission with the plugin's reason."""

from __future__ import annotations

import json
import re
import threading

import pytest
from kubernetes import client as k8s_client

from kubeslurm.device_plugin.protocol import load_stubs
from kubeslurm.device_plugin.server import RESOURCE, ConfigMapPlacements, KubeslurmGpuPlugin
from kubeslurm.reconcile.kube_api import KubeApi, load_api_client
from kubeslurm.render.bridge.placements import Placement, placement_data, placements_config_map_name
from kubeslurm.render.bridge.pod_binding import binding
from testbed.local_cluster import DEFAULT_GPUS
from testbed.waiting import wait_for

from .test_local_cluster import SLEEP, _gpu_view, apply, pod, wait_pod

pytestmark = pytest.mark.cluster

CLUSTER_NAME = "device-plugin-test"
NOBODY = "kubeslurm-nobody"  # a scheduler name no scheduler answers: the pods wait for our Binding


@pytest.fixture
def plugin_node(cluster, namespace):
    """The first node, with the kubeslurm plugin registered and its GPUs allocatable."""
    node = cluster.nodes[0]
    pb2, pb2_grpc = load_stubs()
    core = k8s_client.CoreV1Api(load_api_client(str(cluster.kubeconfig_path)))
    plugin = KubeslurmGpuPlugin(pb2, pb2_grpc, kubernetes_node=node.name, device_dir=node.dir / "dev",
                                plugin_dir=node.device_plugin_dir,
                                placements=ConfigMapPlacements(core, namespace, placements_config_map_name(CLUSTER_NAME)))
    runner = threading.Thread(target=plugin.run, daemon=True)
    runner.start()
    try:
        def allocatable():
            status = json.loads(cluster.kubectl("get", "node", node.name, "-o", "json").stdout)["status"]
            return status["allocatable"].get(RESOURCE) == str(DEFAULT_GPUS)
        wait_for(allocatable, 60, f"{RESOURCE}: {DEFAULT_GPUS} allocatable on {node.name}")
        yield node
    finally:
        plugin.stop()
        runner.join(15)


def _gpu_pod(name: str, gpus: int) -> dict:
    return pod(name, SLEEP, schedulerName=NOBODY, container={"resources": {"limits": {RESOURCE: str(gpus)}}})


def test_the_kubelet_gives_a_placed_pod_exactly_its_slurm_gpus_and_refuses_an_unplaced_one(cluster, namespace, plugin_node):
    kube = KubeApi(load_api_client(str(cluster.kubeconfig_path)))
    apply(cluster, namespace, _gpu_pod("placed", 2))
    uid = json.loads(cluster.kubectl("-n", namespace, "get", "pod", "placed", "-o", "json").stdout)["metadata"]["uid"]
    record = placement_data([Placement(uid, namespace, "placed", plugin_node.name, "4242", (1, 2))])
    cluster.kubectl("-n", namespace, "create", "configmap", placements_config_map_name(CLUSTER_NAME),
                    *[f"--from-literal={key}={value}" for key, value in record.items()])
    kube.bind(namespace, binding("placed", uid, plugin_node.name))
    wait_pod(cluster, namespace, "placed")
    devices, visible = _gpu_view(cluster, namespace, "placed")
    assert devices == {"/dev/nvidia1": (195, 1), "/dev/nvidia2": (195, 2)}
    assert visible == ["1", "2"]

    apply(cluster, namespace, _gpu_pod("unplaced", 1))
    unplaced_uid = json.loads(cluster.kubectl("-n", namespace, "get", "pod", "unplaced", "-o", "json").stdout)["metadata"]["uid"]
    kube.bind(namespace, binding("unplaced", unplaced_uid, plugin_node.name))
    wait_pod(cluster, namespace, "unplaced", "Failed")
    status = json.loads(cluster.kubectl("-n", namespace, "get", "pod", "unplaced", "-o", "json").stdout)["status"]
    assert status["reason"] == "UnexpectedAdmissionError", status
    # The kubelet chose the device (no preference was given): whichever it is, it is not Slurm's.
    assert re.search(r"kubeslurm: devices \['gpu-\d'\] are not the GPUs Slurm allocated", status["message"]), status
