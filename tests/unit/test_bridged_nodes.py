"""Bridged NodeSets (NodeSet spec.bridged, render/bridge/bridged_nodes.py): their slurmd pods run on
the Kubernetes nodes dedicated to the cluster's bridge, request only slurmd's overhead (Slurm shares
the rest out), register the Slurm feature that bridged pods' jobs ask for; and how the operator's
Deployment tells it where the device plugin's host folders are (DevicePluginSettings)."""

import pytest

from kubeslurm.api import ManifestError, parse_object
from kubeslurm.api.bridge import BRIDGED_FEATURE
from kubeslurm.reconcile.bridge_pods import placeholder_request
from kubeslurm.render.bridge.bridged_nodes import (
    BRIDGE_NODE_KEY,
    SLURMD_OVERHEAD_REQUESTS,
    bridged_node_selector,
    bridged_node_set_problem,
    bridged_nodes_problem,
    bridged_nodes_only,
    bridged_slurmd_requests,
    bridged_toleration,
    place_on_bridged_nodes,
)
from kubeslurm.render.bridge.device_plugin import DevicePluginSettings
from kubeslurm.render.bridge.placeholder_job import PlaceholderRequest, sbatch_argv
from kubeslurm.render.cluster_objects import node_set_objects
from kubeslurm.render.slurmd.node import slurmd_conf_line

from .manifests import set_path, with_uid
from .test_bridge import CLUSTER, CPU_NODES, GPU_NODES, MAPPING, UID, bridged

TOLERATION = {"key": "kubeslurm.io/bridge", "operator": "Equal", "value": "research", "effect": "NoSchedule"}


def bridged_gpu_nodes(**changes):
    document = set_path(GPU_NODES, "spec.bridged", True)
    for path, value in changes.items():
        document = set_path(document, path, value)
    return document


def slurmd_pod(cluster_doc, node_set_doc) -> dict:
    objects = node_set_objects(parse_object(with_uid(cluster_doc)), parse_object(with_uid(node_set_doc)))
    (stateful_set,) = [o for o in objects if o["kind"] == "StatefulSet"]
    return stateful_set["spec"]["template"]["spec"]


def slurmd_container(pod_spec: dict) -> dict:
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "slurmd"]
    return container


def test_the_bridged_nodes_are_named_by_one_label_and_taint_of_the_cluster():
    assert BRIDGE_NODE_KEY == "kubeslurm.io/bridge"
    assert bridged_node_selector("research") == {"kubeslurm.io/bridge": "research"}
    assert bridged_toleration("research") == TOLERATION


@pytest.mark.parametrize("pod_spec, expected_selector, expected_tolerations", [
    ({}, {"kubeslurm.io/bridge": "research"}, [TOLERATION]),
    ({"nodeSelector": {"example.com/pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
     {"example.com/pool": "gpu", "kubeslurm.io/bridge": "research"}, [{"key": "gpu", "operator": "Exists"}, TOLERATION]),
    # another cluster's bridged nodes, asked for by the spec: ours wins
    ({"nodeSelector": {"kubeslurm.io/bridge": "other"}}, {"kubeslurm.io/bridge": "research"}, [TOLERATION]),
    ({"tolerations": [TOLERATION]}, {"kubeslurm.io/bridge": "research"}, [TOLERATION]),  # not twice
], ids=["nothing", "site selector and toleration kept", "another cluster's label", "already tolerated"])
def test_placed_on_the_cluster_s_bridged_nodes(pod_spec, expected_selector, expected_tolerations):
    place_on_bridged_nodes(pod_spec, "research")
    assert pod_spec["nodeSelector"] == expected_selector
    assert pod_spec["tolerations"] == expected_tolerations


@pytest.mark.parametrize("resources, expected_requests", [
    ({"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "8", "memory": "32Gi"}},
     {"cpu": "250m", "memory": "256Mi"}),
    # below the overhead: the request may not exceed its limit
    ({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}},
     {"cpu": "100m", "memory": "128Mi"}),
    ({"requests": {"cpu": "1", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "200Mi"}},
     {"cpu": "250m", "memory": "200Mi"}),
    # GPUs: an extended resource's request must equal its limit, and both stay whole
    ({"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"},
      "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}},
     {"cpu": "250m", "memory": "256Mi", "nvidia.com/gpu": "8"}),
], ids=["overhead", "limits below it", "memory limit below it", "GPUs kept"])
def test_requests_are_slurmd_s_overhead_capped_at_the_limits_which_stay(resources, expected_requests):
    answer = bridged_slurmd_requests(resources)
    assert answer["requests"] == expected_requests
    assert answer["limits"] == resources["limits"]


def test_a_bridged_node_set_s_slurmd_pods_on_the_bridged_nodes_with_every_gpu_in_their_limits():
    pod = slurmd_pod(bridged(), bridged_gpu_nodes())
    assert pod["nodeSelector"] == {"kubeslurm.io/bridge": "research"}
    assert pod["tolerations"] == [TOLERATION]
    resources = slurmd_container(pod)["resources"]
    assert resources["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}
    assert resources["requests"] == {**SLURMD_OVERHEAD_REQUESTS, "nvidia.com/gpu": "8"}


def test_a_pod_template_cannot_take_a_bridged_node_set_off_its_nodes():
    node_set = bridged_gpu_nodes(**{"spec.podTemplate": {"spec": {
        "nodeSelector": {"kubeslurm.io/bridge": "other", "example.com/pool": "gpu"},
        "tolerations": [{"key": "example.com/pool", "operator": "Exists"}],
    }}})
    pod = slurmd_pod(bridged(), node_set)
    assert pod["nodeSelector"] == {"kubeslurm.io/bridge": "research", "example.com/pool": "gpu"}
    assert TOLERATION in pod["tolerations"]


def test_a_node_set_that_is_not_bridged_is_placed_and_sized_as_before():
    pod = slurmd_pod(bridged(), GPU_NODES)
    assert "nodeSelector" not in pod and "tolerations" not in pod
    resources = slurmd_container(pod)["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}


@pytest.mark.parametrize("node_set, expected", [
    (bridged_gpu_nodes(), "Features=h100,nvlink,kubeslurm_bridged"),
    (GPU_NODES, "Features=h100,nvlink"),
], ids=["bridged", "not bridged"])
def test_a_bridged_node_set_s_nodes_register_the_bridged_feature(node_set, expected):
    line = slurmd_conf_line(parse_object(node_set))
    assert expected in line.split(" "), line
    assert (BRIDGED_FEATURE in line) is (node_set is not GPU_NODES)


@pytest.mark.parametrize("cluster, node_set, problem", [
    (CLUSTER, bridged_gpu_nodes(), True),
    (bridged(enabled=False), bridged_gpu_nodes(), True),
    (bridged(), bridged_gpu_nodes(), False),
    (CLUSTER, GPU_NODES, False),
], ids=["no bridge", "bridge off", "bridge on", "not bridged"])
def test_a_bridged_node_set_needs_the_cluster_s_bridge(cluster, node_set, problem):
    message = bridged_node_set_problem(parse_object(cluster), parse_object(node_set))
    if not problem:
        assert message is None
        return
    assert message.startswith("spec.bridged is true but SlurmCluster research has spec.bridge.enabled off"), message
    assert "turn the bridge on there" in message and "set spec.bridged to false" in message


@pytest.mark.parametrize("node_sets, expected", [
    ([], False),
    ([GPU_NODES, CPU_NODES], False),
    ([bridged_gpu_nodes(), CPU_NODES], True),
], ids=["none", "none bridged", "one bridged"])
def test_bridged_pods_go_to_bridged_nodes_only_once_the_cluster_has_some(node_sets, expected):
    assert bridged_nodes_only([parse_object(n) for n in node_sets]) is expected


POD = {
    "metadata": {"name": "web-0", "namespace": "inference", "uid": UID},
    "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
}


@pytest.mark.parametrize("node_sets, constraint", [
    ([GPU_NODES, CPU_NODES], None),
    ([bridged_gpu_nodes(), CPU_NODES], "--constraint=kubeslurm_bridged"),
], ids=["no bridged NodeSet", "a bridged NodeSet"])
def test_the_placeholder_asks_for_the_bridged_feature_only_when_bridged_nodes_exist(node_sets, constraint):
    (mapping,) = parse_object(bridged()).spec.bridge.namespaces
    request = placeholder_request(POD, mapping, bridged_nodes_only([parse_object(n) for n in node_sets]))
    argv = sbatch_argv(request)
    assert [a for a in argv if a.startswith("--constraint")] == ([constraint] if constraint else [])
    if constraint:  # an option of sbatch's, before the script
        assert argv.index(constraint) < argv.index("--wrap=exec sleep infinity")


def test_the_placeholder_request_is_not_bridged_unless_told():
    request = PlaceholderRequest(namespace="inference", pod_name="web-0", pod_uid=UID, account=MAPPING["account"],
                                 user=MAPPING["user"], cpus=1, memory_mib=1024)
    assert not request.bridged_nodes_only
    assert not any(a.startswith("--constraint") for a in sbatch_argv(request))


def test_a_user_may_not_give_nodes_the_bridged_feature():
    with pytest.raises(ManifestError, match=r"spec.features\[1\]: features must not name kubeslurm_bridged"):
        parse_object(set_path(GPU_NODES, "spec.features", ["nvlink", "kubeslurm_bridged"]))


def test_the_crd_refuses_the_bridged_feature_with_the_model_s_message():
    from kubeslurm.api.bridge import BRIDGED_FEATURE_IS_THE_OPERATORS
    from kubeslurm.api.crds import custom_resource_definitions

    (crd,) = [c for c in custom_resource_definitions() if c["spec"]["names"]["kind"] == "NodeSet"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    (rule,) = [r for r in spec["x-kubernetes-validations"] if r["message"] == BRIDGED_FEATURE_IS_THE_OPERATORS]
    assert "'kubeslurm_bridged' in self.features" in rule["rule"]
    assert spec["properties"]["bridged"]["type"] == "boolean"
    assert "kubeslurm.io/bridge=<cluster>" in spec["properties"]["bridged"]["description"]


IMAGE = "localhost/kubeslurm/operator:0.1.0"


@pytest.mark.parametrize("environ, expected", [
    ({}, None),
    ({"KUBESLURM_DEVICE_PLUGIN_IMAGE": ""}, None),
    ({"KUBESLURM_DEVICE_PLUGIN_IMAGE": IMAGE},
     DevicePluginSettings(IMAGE, "/dev", "/var/lib/kubelet/device-plugins")),
    ({"KUBESLURM_DEVICE_PLUGIN_IMAGE": IMAGE, "KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR": "/var/lib/kubeslurm-cluster/nodes/kubeslurm-1/dev",
      "KUBESLURM_DEVICE_PLUGIN_KUBELET_DIR": "/srv/kubelet/device-plugins"},
     DevicePluginSettings(IMAGE, "/var/lib/kubeslurm-cluster/nodes/kubeslurm-1/dev", "/srv/kubelet/device-plugins")),
    # empty: the default (a chart value may render "")
    ({"KUBESLURM_DEVICE_PLUGIN_IMAGE": IMAGE, "KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR": ""},
     DevicePluginSettings(IMAGE, "/dev", "/var/lib/kubelet/device-plugins")),
], ids=["no image", "empty image", "defaults", "both folders", "empty folder"])
def test_device_plugin_settings_from_the_operator_s_environment(environ, expected):
    assert DevicePluginSettings.from_environment(environ) == expected


@pytest.mark.parametrize("variable, value", [
    ("KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR", "dev"),
    ("KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR", "/dev/../etc"),
    ("KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR", "/dev\n--cluster=other"),
    ("KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR", "/dev/"),
    ("KUBESLURM_DEVICE_PLUGIN_KUBELET_DIR", "/var/lib/kubelet device-plugins"),
    ("KUBESLURM_DEVICE_PLUGIN_KUBELET_DIR", "/"),
    ("KUBESLURM_DEVICE_PLUGIN_IMAGE", "localhost/op erator:1"),
], ids=["relative", "dot-dot", "newline", "trailing slash", "space", "root", "image with a space"])
def test_a_bad_device_plugin_setting_is_refused_naming_the_variable_and_the_fix(variable, value):
    environ = {"KUBESLURM_DEVICE_PLUGIN_IMAGE": IMAGE, variable: value}
    with pytest.raises(ValueError, match=variable) as refused:
        DevicePluginSettings.from_environment(environ)
    assert "set it to" in str(refused.value)


def kube_node(name: str, cluster: str | None = "research", **allocatable) -> dict:
    labels = {"kubernetes.io/hostname": name} | ({BRIDGE_NODE_KEY: cluster} if cluster else {})
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8", **allocatable}}}


# research.yaml's h100 NodeSet, bridged: 8 CPUs, 32Gi, 8 GPUs (nvidia.com/gpu) a node.
@pytest.mark.parametrize("nodes, reason, said", [
    ([kube_node("gpu-1"), kube_node("gpu-2", cpu="8", memory="32Gi")], None, None),
    ([], "NoBridgedNodes", "spec.bridged: no Kubernetes node is labelled kubeslurm.io/bridge=research"),
    # labelled for another cluster's bridge, or not at all: not ours
    ([kube_node("gpu-1", cluster="other"), kube_node("gpu-2", cluster=None)], "NoBridgedNodes",
     "kubectl taint node NODE kubeslurm.io/bridge=research:NoSchedule"),
    ([kube_node("gpu-1"), kube_node("gpu-2", cpu="7500m")], "BridgedNodesTooSmall",
     "node gpu-2 has cpu 7500m allocatable, spec.resources.cpu asks for 8"),
    ([kube_node("gpu-1", memory="31Gi")], "BridgedNodesTooSmall",
     "node gpu-1 has memory 31Gi allocatable, spec.resources.memory asks for 32Gi"),
    ([kube_node("gpu-1", **{"nvidia.com/gpu": "4"})], "BridgedNodesTooSmall",
     "node gpu-1 has nvidia.com/gpu 4 allocatable, spec.gpus.count asks for 8"),
    # a node whose device plugin has not registered its GPUs yet has none
    ([{"metadata": {"name": "gpu-1", "labels": {BRIDGE_NODE_KEY: "research"}}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}}],
     "BridgedNodesTooSmall", "node gpu-1 has nvidia.com/gpu 0 allocatable, spec.gpus.count asks for 8"),
])
def test_a_bridged_node_set_is_checked_against_its_dedicated_nodes_allocatable(nodes, reason, said):
    node_set = parse_object(with_uid(bridged_gpu_nodes()))
    problem = bridged_nodes_problem("research", node_set, nodes)
    if reason is None:
        assert problem is None
        return
    assert problem[0] == reason and said in problem[1], problem
    if reason == "BridgedNodesTooSmall":
        assert problem[1].endswith("lower the NodeSet's resources or take the label kubeslurm.io/bridge=research off the smaller nodes")
