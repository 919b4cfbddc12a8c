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

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kubeslurm.api import SlurmCluster
from kubeslurm.api.names import MOUNT_PATH_PATTERN, PATTERN_HELP
from kubeslurm.render.bridge.bridged_nodes import bridged_node_selector, bridged_toleration
from kubeslurm.render.bridge.placements import placements_config_map_name
from kubeslurm.render.k8s import labels
from kubeslurm.render.k8s.metadata import object_meta

KUBELET_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEVICE_DIR = "/dev"
IMAGE_ENV = "KUBESLURM_DEVICE_PLUGIN_IMAGE"
DEVICE_DIR_ENV = "KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR"
KUBELET_DIR_ENV = "KUBESLURM_DEVICE_PLUGIN_KUBELET_DIR"
PLUGIN_VOLUME = "kubelet-device-plugins"
DEVICE_VOLUME = "node-devices"


# What device_plugin_objects renders, in the order to delete it (the pods' DaemonSet first).
DEVICE_PLUGIN_KINDS = ("DaemonSet", "RoleBinding", "Role", "ServiceAccount")


def device_plugin_name(cluster_name: str) -> str:
    return f"{cluster_name}-gpu-device-plugin"


@dataclass(frozen=True)
class DevicePluginSettings:
    """How the operator's Deployment says to run the device plugin on the bridged nodes.

    image: an image with kubeslurm and its device-plugin extra (the operator's own).
    device_dir: the nodes' folder of nvidiaN device files (the local cluster's fake GPUs live
    elsewhere than /dev). kubelet_plugin_dir: the kubelet's device-plugin folder (its
    --root-dir may differ from /var/lib/kubelet). Both become hostPath volumes: absolute paths
    of plain components, checked here whoever made the settings.
    """
    image: str
    device_dir: str = DEVICE_DIR
    kubelet_plugin_dir: str = KUBELET_PLUGIN_DIR

    def __post_init__(self):
        for field, env in (("device_dir", DEVICE_DIR_ENV), ("kubelet_plugin_dir", KUBELET_DIR_ENV)):
            value = getattr(self, field)
            if not isinstance(value, str) or not re.fullmatch(MOUNT_PATH_PATTERN, value):
                raise ValueError(
                    f"{env} (the device plugin's {field}) {value!r} is not {PATTERN_HELP[MOUNT_PATH_PATTERN]}: "
                    f"set it to the nodes' folder, e.g. {getattr(DevicePluginSettings, field)}, or unset it for that default")
        if not isinstance(self.image, str) or not self.image.strip() or any(c.isspace() for c in self.image):
            raise ValueError(f"{IMAGE_ENV} {self.image!r} is not an image reference: set it to the operator's image")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> DevicePluginSettings | None:
        """From the operator's environment (its Deployment); None without an image: no DaemonSet."""
        environ = os.environ if environ is None else environ
        image = environ.get(IMAGE_ENV)
        if not image:
            return None
        return cls(image=image, device_dir=environ.get(DEVICE_DIR_ENV) or DEVICE_DIR,
                   kubelet_plugin_dir=environ.get(KUBELET_DIR_ENV) or KUBELET_PLUGIN_DIR)


def device_plugin_objects(cluster: SlurmCluster, settings: DevicePluginSettings, *,
                          image_pull_policy: str = "IfNotPresent") -> list[dict]:
    """ServiceAccount, Role, RoleBinding and DaemonSet, in apply order; [] with the bridge off."""
    if not (cluster.spec.bridge and cluster.spec.bridge.enabled):
        return []
    image, device_dir, plugin_dir = settings.image, settings.device_dir, settings.kubelet_plugin_dir
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
                 f"--device-dir={device_dir}", f"--plugin-dir={plugin_dir}"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": PLUGIN_VOLUME, "mountPath": plugin_dir},
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
                    "tolerations": [bridged_toleration(name)],
                    "terminationGracePeriodSeconds": 10,
                    "containers": [container],
                    "volumes": [
                        {"name": PLUGIN_VOLUME, "hostPath": {"path": plugin_dir, "type": "Directory"}},
                        {"name": DEVICE_VOLUME, "hostPath": {"path": device_dir, "type": "Directory"}},
                    ],
                },
            },
        },
    }
    return [service_account, role, role_binding, daemon_set]
