"""The kubeslurm device plugin's DaemonSet and RBAC (render/bridge/device_plugin.py): nothing with
the bridge off; with it on, a plugin on the bridged nodes only, allowed to read exactly the
cluster's placement record, root only where the kubelet's folder needs it."""

import pytest

from kubeslurm.api import parse_object
from kubeslurm.render.bridge.device_plugin import DevicePluginSettings, device_plugin_objects
from kubeslurm.render.k8s import labels

from .manifests import set_path
from .test_bridge import CLUSTER, bridged

UID = "5d2c1b0a-9f8e-4d7c-b6a5-f4e3d2c1b0a9"
IMAGE = "localhost/kubeslurm/operator:0.1.0"


def cluster(document):
    return parse_object(set_path(document, "metadata.uid", UID))


SETTINGS = DevicePluginSettings(image=IMAGE)


def rendered(**options):
    return {o["kind"]: o for o in device_plugin_objects(cluster(bridged()), DevicePluginSettings(image=IMAGE, **options))}


@pytest.mark.parametrize("document", [CLUSTER, bridged(enabled=False)], ids=["no bridge", "bridge off"])
def test_nothing_without_the_bridge(document):
    assert device_plugin_objects(cluster(document), SETTINGS) == []


def test_the_objects_in_apply_order_owned_by_the_cluster_and_labelled_bridge():
    objects = device_plugin_objects(cluster(bridged()), SETTINGS)
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding", "DaemonSet"]
    name, namespace = objects[0]["metadata"]["name"], objects[0]["metadata"]["namespace"]
    for obj in objects:
        meta = obj["metadata"]
        assert (meta["name"], meta["namespace"]) == (name, namespace)
        assert meta["ownerReferences"][0]["uid"] == UID
        assert meta["labels"][labels.COMPONENT] == "bridge"
    assert name == "research-gpu-device-plugin"


def test_the_role_reads_only_the_placement_record():
    objects = rendered()
    assert objects["Role"]["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                                         "resourceNames": ["research-bridge-placements"], "verbs": ["get"]}]
    assert objects["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "research-gpu-device-plugin",
                                                  "namespace": objects["Role"]["metadata"]["namespace"]}]
    assert objects["DaemonSet"]["spec"]["template"]["spec"]["serviceAccountName"] == "research-gpu-device-plugin"


@pytest.mark.parametrize("device_dir, plugin_dir", [
    ("/dev", "/var/lib/kubelet/device-plugins"),
    ("/var/lib/kubeslurm-cluster/nodes/kubeslurm-2/dev", "/var/lib/kubelet/device-plugins"),
    ("/dev", "/srv/kubelet/device-plugins"),
])
def test_the_daemonset_runs_on_bridged_nodes_with_the_host_folders_at_their_own_paths(device_dir, plugin_dir):
    spec = rendered(device_dir=device_dir, kubelet_plugin_dir=plugin_dir)["DaemonSet"]["spec"]
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["nodeSelector"] == {"kubeslurm.io/bridge": "research"}
    assert pod["tolerations"] == [{"key": "kubeslurm.io/bridge", "operator": "Equal", "value": "research",
                                   "effect": "NoSchedule"}]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["/opt/kubeslurm/bin/kubeslurm", "device-plugin"]
    assert container["args"] == ["--cluster=research", f"--namespace={spec_namespace()}", f"--device-dir={device_dir}",
                                 f"--plugin-dir={plugin_dir}"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert volumes == {"kubelet-device-plugins": plugin_dir, "node-devices": device_dir}
    assert mounts["node-devices"] == {"name": "node-devices", "mountPath": device_dir, "readOnly": True}
    assert mounts["kubelet-device-plugins"]["mountPath"] == plugin_dir


def spec_namespace():
    return cluster(bridged()).metadata.namespace


def test_root_for_the_kubelet_s_folder_and_nothing_more():
    (container,) = rendered()["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"] == {
        "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
    }
    assert "privileged" not in container["securityContext"]


@pytest.mark.parametrize("document, image, rendered_", [
    (bridged(), IMAGE, True),
    (bridged(), None, False),  # the operator does not know the plugin's image: nothing to run
    (bridged(enabled=False), IMAGE, False),
], ids=["bridge on, image known", "no image", "bridge off"])
def test_the_operator_applies_the_plugin_last_when_the_bridge_is_on_and_it_knows_the_image(document, image, rendered_):
    from kubeslurm.render.cluster_objects import desired_objects

    from .manifests import contract_documents

    _cluster, gpu_nodes, cpu_nodes = contract_documents()
    node_sets = [parse_object(set_path(gpu_nodes, "metadata.uid", UID)), parse_object(set_path(cpu_nodes, "metadata.uid", UID))]
    model = cluster(document)
    objects = desired_objects(model, node_sets, database_password="pw", config_hash_key=b"k" * 32,
                              device_plugin=image and DevicePluginSettings(image=image))
    plugin = device_plugin_objects(model, SETTINGS)
    assert (objects[-len(plugin):] == plugin) is rendered_
    assert any(o["kind"] == "DaemonSet" for o in objects) is rendered_
