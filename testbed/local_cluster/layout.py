"""Where the local cluster lives: its folders, its networks and its nodes' names.

Everything lives under CLUSTER_DIR (default /var/lib/kubeslurm-cluster, or
$KUBESLURM_CLUSTER_DIR) and RUN_DIR; the first node's kubelet uses the standard
/var/lib/kubelet so device plugins find it where they expect.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

CLUSTER_DIR = Path(os.environ.get("KUBESLURM_CLUSTER_DIR", "/var/lib/kubeslurm-cluster"))
RUN_DIR = Path("/run/kubeslurm-cluster")
HERE = Path(__file__).resolve().parent
LOGS = CLUSTER_DIR / "logs"
CONTROL_PLANE_DIR = CLUSTER_DIR / "control-plane"
# The record of the daemons (testbed/processes.py) and of what `up` changed on the host.
STATE_FILE = CLUSTER_DIR / "state.json"
KUBECONFIG = CLUSTER_DIR / "admin.kubeconfig"

HOST_BRIDGE = "ksc-nodes"
NODE_NET = ipaddress.ip_network("10.250.0.0/24")
HOST_IP = "10.250.0.1"  # on HOST_BRIDGE; the API server listens here
APISERVER_PORT = 6443
POD_CIDR = ipaddress.ip_network("10.244.0.0/16")  # node i gets 10.244.(i-1).0/24
SERVICE_CIDR = "10.96.0.0/16"
DNS_IP = "10.96.0.10"
DOMAIN = "cluster.local"
CNI_BRIDGE = "ksc-cni0"
IPTABLES_COMMENT = "kubeslurm-cluster"
MAX_NODES = 8
DEFAULT_GPUS = 8
# Hard-coded in the kubelet (pluginapi.DevicePluginPath), whatever its --root-dir.
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
NODE_BINARIES = ("kube-scheduler", "kubelet", "kube-proxy")
# Kubernetes binaries this cluster needs on top of the API-server tier's.
ALL_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl") + NODE_BINARIES


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class Node:
    index: int  # 1-based

    @classmethod
    def named(cls, name: str) -> "Node":
        return cls(int(name.rsplit("-", 1)[1]))

    @property
    def name(self) -> str:
        return f"kubeslurm-{self.index}"

    @property
    def netns(self) -> str:
        return f"ksc-{self.name}"

    @property
    def host_veth(self) -> str:
        return f"ksc-h{self.index}"

    @property
    def ip(self) -> str:
        return str(NODE_NET.network_address + 10 + self.index)

    @property
    def pod_subnet(self) -> str:
        return str(list(POD_CIDR.subnets(new_prefix=24))[self.index - 1])

    @property
    def dir(self) -> Path:
        return CLUSTER_DIR / "nodes" / self.name

    @property
    def run_dir(self) -> Path:
        return RUN_DIR / self.name

    @property
    def kubelet_root(self) -> Path:
        # The first node is where a device plugin (or a human) expects a kubelet.
        return Path("/var/lib/kubelet") if self.index == 1 else self.dir / "kubelet-root"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.dir / "containerd" / "config.toml"

    @property
    def device_plugin_dir(self) -> Path:
        """Where this node's kubelet.sock and device plugin sockets are, seen from the host."""
        if self.index == 1:
            return Path(DEVICE_PLUGIN_DIR)
        return self.dir / "device-plugins"

    @property
    def cgroup_root(self) -> str:
        return f"/kubeslurm/{self.name}"

    def log(self, name: str) -> Path:
        return LOGS / self.name / f"{name}.log"
