"""The kubeslurm device plugin's objects (render/bridge/device_plugin.py) as a real API server
takes them, and its access: with its own ServiceAccount's token, the plugin's record reader
(device_plugin/server.ConfigMapPlacements) reads the placement record the operator writes,
finds no placements while there is no record, and is refused every other ConfigMap."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from kubeslurm.api import parse_object
from kubeslurm.device_plugin.server import ConfigMapPlacements
from kubeslurm.reconcile.kube_api import load_api_client
from kubeslurm.render.bridge.device_plugin import DevicePluginSettings, device_plugin_name, device_plugin_objects
from kubeslurm.render.bridge.placements import Placement, placement_data, placements_config_map_name
from tests.unit.manifests import contract_documents, set_path

pytestmark = pytest.mark.k8s

PLACED = Placement("0f5c1e9a-1111-4a6b-9c1d-2e3f4a5b6c7d", "inference", "web-7d9f", "kubeslurm-2", "812", (1, 2))


def _bridged_cluster(namespace: str):
    cluster, _gpu, _cpu = contract_documents()
    cluster = set_path(cluster, "spec.bridge", {"enabled": True, "namespaces": [
        {"namespace": "inference", "account": "nlp", "user": "bob", "partition": "gpu"}]})
    cluster = set_path(cluster, "metadata.namespace", namespace)
    return parse_object(set_path(cluster, "metadata.uid", str(uuid.uuid4())))


def _config_map(namespace: str, name: str, data: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                       "data": data})


def test_the_plugin_reads_exactly_its_cluster_s_placement_record(control_plane, namespace, tmp_path):
    cluster = _bridged_cluster(namespace)
    objects = device_plugin_objects(cluster, DevicePluginSettings(image="localhost/kubeslurm/operator:0.1.0"))
    for obj in objects:
        # No SlurmCluster of that uid exists here: the garbage collector would take its dependents.
        del obj["metadata"]["ownerReferences"]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    created = json.loads(control_plane.kubectl("get", "daemonset", device_plugin_name(cluster.metadata.name),
                                               "-n", namespace, "-o", "json").stdout)
    assert created["spec"]["template"]["spec"]["nodeSelector"] == {"kubeslurm.io/bridge": cluster.metadata.name}

    kubeconfig = control_plane.write_service_account_kubeconfig(
        namespace, device_plugin_name(cluster.metadata.name), tmp_path / "plugin.kubeconfig")
    as_plugin = k8s_client.CoreV1Api(load_api_client(str(kubeconfig)))
    record_name = placements_config_map_name(cluster.metadata.name)
    read_record = ConfigMapPlacements(as_plugin, namespace, record_name)

    assert read_record() == []  # no record yet: nothing placed, every allocation refused
    control_plane.kubectl("apply", "-f", "-", input=_config_map(namespace, record_name, placement_data([PLACED])))
    assert read_record() == [PLACED]

    control_plane.kubectl("apply", "-f", "-", input=_config_map(namespace, "someone-else", {"secret": "x"}))
    with pytest.raises(ApiException) as refused:
        ConfigMapPlacements(as_plugin, namespace, "someone-else")()
    assert refused.value.status == 403
    with pytest.raises(ApiException) as refused:
        as_plugin.list_namespaced_config_map(namespace)
    assert refused.value.status == 403
