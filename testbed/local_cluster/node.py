"""One node of the local cluster: containerd, the kubelet, kube-proxy and the fake GPU
device plugin, each a supervised daemon inside the node's network namespace (the plugin
runs beside it on the host)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from testbed.control_plane import ControlPlane
from testbed.local_cluster import host, system_images
from testbed.local_cluster.layout import DEVICE_PLUGIN_DIR, DNS_IP, DOMAIN, POD_CIDR, ClusterError, Node
from testbed.local_cluster.node_configs import (
    KUBE_PROXY_CONFIG,
    KUBELET_CONFIG,
    cni_config,
    containerd_config,
)
from testbed import REPO
from testbed.processes import Supervisor, log_tails
from testbed.waiting import wait_for


@dataclass
class NodeStarter:
    """What starting a node needs: the control plane (certificates), the daemons'
    supervisor, the Kubernetes binaries and the system images."""

    cp: ControlPlane
    supervisor: Supervisor
    bin_dir: Path
    tools: dict[str, Path]
    gpus_per_node: int

    def start(self, node: Node) -> None:
        d = node.dir
        for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "kube-proxy", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        node.run_dir.mkdir(parents=True, exist_ok=True)
        host.make_cgroups(node)
        (d / "cni" / "net.d" / "10-kubeslurm.conflist").write_text(cni_config(node))
        self._start_containerd(node)
        self._import_images(node)
        _prepare_kubelet_root(node)
        self._start_kubelet(node)
        self._start_kube_proxy(node)
        self._start_fake_gpu(node)

    def _spawn(self, node: Node, name: str, argv: list[str], *, marker: str, in_netns: bool = True,
               env: dict | None = None) -> None:
        if in_netns:
            # Only the network namespace: mounts must stay shared with the host.
            argv = ["nsenter", f"--net=/run/netns/{node.netns}", "--", *argv]
        self.supervisor.spawn(name, argv, marker=marker, log=node.log(name), node=node.name,
                              cwd=REPO, env=env, check_started=0.2)

    def _start_containerd(self, node: Node) -> None:
        config = node.containerd_config
        config.write_text(containerd_config(node))
        self._spawn(node, "containerd", ["containerd", "--config", str(config)], marker=str(config))
        wait_for(lambda: host.run(["ctr", "-a", str(node.containerd_socket), "version"], check=False).returncode == 0,
                 60, f"containerd of {node.name}", details=lambda: log_tails(node.log("containerd")),
                 error=ClusterError)

    def _import_images(self, node: Node) -> None:
        for name in ("pause", "busybox", "coredns"):
            # Unpacked into the overlayfs snapshotter, where the CRI plugin looks.
            host.run(["ctr", "-a", node.containerd_socket, "-n", "k8s.io", "images", "import", self.tools[name]])

    def _start_kubelet(self, node: Node) -> None:
        cp = self.cp
        kdir = node.dir / "kubelet"
        user = f"system:node:{node.name}"
        cp.sign_client_cert(f"kubelet-{node.name}", user, ("system:nodes",))
        cp.sign_serving_cert(f"kubelet-serving-{node.name}", node.name, [f"IP:{node.ip}", f"DNS:{node.name}"])
        kubeconfig = cp.write_kubeconfig(kdir / "kubeconfig", f"kubelet-{node.name}", user)
        config = kdir / "config.yaml"
        config.write_text(KUBELET_CONFIG.substitute(
            address=node.ip,
            ca=cp.pki / "ca.crt",
            cert=cp.pki / f"kubelet-serving-{node.name}.crt",
            key=cp.pki / f"kubelet-serving-{node.name}.key",
            dns_ip=DNS_IP,
            domain=DOMAIN,
            cgroup_root=node.cgroup_root,
            runtime=f"unix://{node.containerd_socket}",
            pod_cidr=node.pod_subnet,
            pod_logs_dir=node.dir / "pod-logs",
        ))
        argv = [
            str(self.bin_dir / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={node.kubelet_root}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            f"--pod-infra-container-image={system_images.PAUSE_IMAGE}",
            f"--node-labels=kubeslurm.local/node-index={node.index}",
            "--v=1",
        ]
        if node.index > 1:
            argv = _own_device_plugin_dir(node) + argv
        self._spawn(node, "kubelet", argv, marker=str(config))

    def _start_kube_proxy(self, node: Node) -> None:
        cp = self.cp
        pdir = node.dir / "kube-proxy"
        if not (cp.pki / "kube-proxy.crt").exists():
            cp.sign_client_cert("kube-proxy", "system:kube-proxy")
        kubeconfig = cp.write_kubeconfig(pdir / "kubeconfig", "kube-proxy", "system:kube-proxy")
        config = pdir / "config.yaml"
        config.write_text(KUBE_PROXY_CONFIG.substitute(
            kubeconfig=kubeconfig, cluster_cidr=POD_CIDR, node=node.name, node_ip=node.ip,
        ))
        self._spawn(node, "kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={config}", "--v=1"],
                    marker=str(config))

    def _start_fake_gpu(self, node: Node) -> None:
        if self.gpus_per_node <= 0:
            return
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._spawn(node, "fake-gpu", [
            sys.executable, "-m", "testbed.local_cluster.fake_gpu",
            f"--node-name={node.name}",
            f"--count={self.gpus_per_node}",
            f"--device-dir={node.dir / 'dev'}",
            f"--plugin-dir={node.device_plugin_dir}",
        ], marker=str(node.dir / "dev"), in_netns=False, env=env)


def _prepare_kubelet_root(node: Node) -> None:
    root = node.kubelet_root
    if root == Path("/var/lib/kubelet") and root.exists() and any(root.iterdir()) \
            and not (root / ".kubeslurm-cluster").exists():
        raise ClusterError(f"{root} holds another kubelet's data; not touching it")
    root.mkdir(parents=True, exist_ok=True)
    (root / ".kubeslurm-cluster").write_text("made by kubeslurm's local cluster; removed by `make cluster-down`\n")
    if str(root) in host.mountpoints():
        return  # a node powered on again: its shared mount outlived the power cut
    # Volume mounts made by the kubelet must propagate into containers; the
    # host's / is private here, so the kubelet root becomes its own shared mount.
    host.run(["mount", "--bind", str(root), str(root)])
    host.run(["mount", "--make-rshared", str(root)])


def _own_device_plugin_dir(node: Node) -> list[str]:
    """A command prefix giving a second kubelet its own device-plugin directory.

    Every kubelet serves kubelet.sock in /var/lib/kubelet/device-plugins, so a
    second one on the same host would take over the first one's plugins. It runs
    in a mount namespace of its own where node.device_plugin_dir is bind-mounted
    there. The namespace keeps the host's propagation (--propagation unchanged):
    the kubelet's volume mounts under its (shared) root still reach containerd.
    Only the first node's /var/lib/kubelet is made private in it, so the bind
    mount stays inside.
    """
    node.device_plugin_dir.mkdir(parents=True, exist_ok=True)
    Path(DEVICE_PLUGIN_DIR).mkdir(parents=True, exist_ok=True)
    script = (
        "set -e; mount --make-rprivate /var/lib/kubelet; "
        f"mount --bind {node.device_plugin_dir} {DEVICE_PLUGIN_DIR}; exec \"$@\""
    )
    return ["unshare", "--mount", "--propagation", "unchanged", "--", "sh", "-c", script, "kubelet"]

