"""The kubeslurm device plugin's DaemonSet and the one permission it needs (spec.bridge).

On every bridged node (label `kubeslurm.io/bridge=<cluster>`; the taint of the same key keeps
other pods off, and this DaemonSet tolerates it) `kubeslurm device-plugin` registers
`kubeslurm.io/gpu` with the kubelet and gives each GPU only to the pod Slurm allocated it to
(device_plugin/server.py). It reads one ConfigMap, the cluster's placement record, and nothing
else: its Role may `get` exactly that ConfigMap. Off (no objects) unless spec.bridge.enabled.

Why root: the kubelet's device-plugin folder is root's, and the plugin's socket goes there.
Nothing else: every capability dropped, no privilege escalation, a read-only root, the node's
device folder mounted read-only (the plugin only lists the nvidiaN files and names them in
its answers; the container runtime opens them). The device folder is mounted at its own
path, because the DeviceSpecs name host paths.
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.bridge.placements import placements_config_map_name
from kubeslurm.render.k8s import labels
from kubeslurm.render.k8s.metadata import object_meta

KUBELET_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
BRIDGE_NODE_KEY = "kubeslurm.io/bridge"
PLUGIN_VOLUME = "kubelet-device-plugins"
DEVICE_VOLUME = "node-devices"


# What device_plugin_objects renders, in the order to delete it (the pods' DaemonSet first).
DEVICE_PLUGIN_KINDS = ("DaemonSet", "RoleBinding", "Role", "ServiceAccount")


def device_plugin_name(cluster_name: str) -> str:
    return f"{cluster_name}-gpu-device-plugin"


def bridged_node_selector(cluster_name: str) -> dict[str, str]:
    """The label of the Kubernetes nodes whose GPUs this cluster's Slurm hands to pods."""
    return {BRIDGE_NODE_KEY: cluster_name}


def device_plugin_objects(cluster: SlurmCluster, *, image: str, image_pull_policy: str = "IfNotPresent",
                          device_dir: str = "/dev") -> list[dict]:
    """ServiceAccount, Role, RoleBinding and DaemonSet, in apply order; [] with the bridge off.

    image: an image with kubeslurm and its device-plugin extra (the operator's image).
    device_dir: where the nodes' nvidiaN device files are (the local cluster's fake GPUs live
    elsewhere than /dev).
    """
    if not (cluster.spec.bridge and cluster.spec.bridge.enabled):
        return []
    if not device_dir.startswith("/") or "\n" in device_dir:
        raise ValueError(f"device_dir must be an absolute path, not {device_dir!r}")
    name = cluster.metadata.name
    plugin = device_plugin_name(name)
    object_labels = labels.object_labels(name, labels.BRIDGE)
    pod_labels = labels.selector_labels(name, labels.BRIDGE)
    service_account = {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": object_meta(plugin, cluster, object_labels)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": object_meta(plugin, cluster, object_labels),
        "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                   "resourceNames": [placements_config_map_name(name)], "verbs": ["get"]}],
    }
    role_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": object_meta(plugin, cluster, object_labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": plugin},
        "subjects": [{"kind": "ServiceAccount", "name": plugin, "namespace": cluster.metadata.namespace}],
    }
    container = {
        "name": "device-plugin",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["/opt/kubeslurm/bin/kubeslurm", "device-plugin"],
        "args": [f"--cluster={name}", f"--namespace={cluster.metadata.namespace}",
                 f"--device-dir={device_dir}", f"--plugin-dir={KUBELET_PLUGIN_DIR}"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": PLUGIN_VOLUME, "mountPath": KUBELET_PLUGIN_DIR},
            {"name": DEVICE_VOLUME, "mountPath": device_dir, "readOnly": True},
        ],
    }
    daemon_set = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": object_meta(plugin, cluster, object_labels),
        "spec": {
            "selector": {"matchLabels": pod_labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(object_labels)},
                "spec": {
                    "serviceAccountName": plugin,
                    "enableServiceLinks": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "nodeSelector": bridged_node_selector(name),
                    "tolerations": [{"key": BRIDGE_NODE_KEY, "operator": "Equal", "value": name, "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 10,
                    "containers": [container],
                    "volumes": [
                        {"name": PLUGIN_VOLUME, "hostPath": {"path": KUBELET_PLUGIN_DIR, "type": "Directory"}},
                        {"name": DEVICE_VOLUME, "hostPath": {"path": device_dir, "type": "Directory"}},
                    ],
                },
            },
        },
    }
    return [service_account, role, role_binding, daemon_set]
