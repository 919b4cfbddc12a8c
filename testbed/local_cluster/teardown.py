"""Stopping the local cluster so that nothing of it stays: no process, container, mount,
cgroup, network namespace, link or iptables rule. Safe to run at any time, on whatever a
killed or half-started run left; logs stay for a post-mortem until the next `up`."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from testbed.local_cluster import host, system_images
from testbed.local_cluster.layout import (
    CLUSTER_DIR,
    CONTROL_PLANE_DIR,
    KUBECONFIG,
    LOGS,
    MAX_NODES,
    RUN_DIR,
    STATE_FILE,
    Node,
)
from testbed.processes import Supervisor, comm, kill_pids, pids_with

# The daemons of a run whose record is gone are found by the paths in their command
# lines, and by these names, so that an editor open on a config survives.
DAEMON_NAMES = {"etcd", "kube-apiserver", "kube-controller", "kube-scheduler", "kubelet", "kube-proxy",
                "containerd", "nsenter", "unshare", "sh"}  # comm is cut at 15 characters


def recorded_nodes(state: dict, default: list[Node]) -> list[Node]:
    """The nodes the record names, and any a previous run may have had beyond them."""
    nodes = [Node.named(n) for n in state.get("nodes", [])] or list(default)
    known = {n.name for n in nodes}
    return nodes + [Node(i) for i in range(1, MAX_NODES + 1) if Node(i).name not in known
                    and Path(f"/run/netns/{Node(i).netns}").exists()]


def stop_daemons(supervisor: Supervisor) -> None:
    """Every recorded daemon, then those of a run whose record is gone."""
    supervisor.stop()
    for marker in (str(CONTROL_PLANE_DIR), str(CLUSTER_DIR / "nodes")):
        kill_pids(pid for pid in pids_with(marker)
                  if comm(pid) in DAEMON_NAMES or comm(pid).startswith("python"))


def power_off(supervisor: Supervisor, node: Node) -> None:
    """Node loss: its daemons and every container SIGKILLed at once."""
    supervisor.kill(node=node.name)
    kill_shims(node)
    host.kill_cgroup(node)


def tear_down(supervisor: Supervisor, nodes: list[Node], crictl: Path | None) -> None:
    state = supervisor.load()
    # 1. The kubelets and plugins first, so nothing restarts pods behind us.
    supervisor.stop(only=("kubelet", "kube-proxy", "fake-gpu"))
    # 2. Pod sandboxes through CRI, so CNI releases addresses and rules.
    for node in nodes:
        remove_pods(node, crictl)
    # 3. Everything else we started: containerd, the control plane.
    stop_daemons(supervisor)
    # 4. What outlives containerd: shims and containers.
    for node in nodes:
        kill_shims(node)
        host.kill_cgroup(node)
    # 5. Mounts, namespaces, links, rules, files.
    host.unmount_below([str(CLUSTER_DIR), str(RUN_DIR)] + [str(n.kubelet_root) for n in nodes])
    host.remove_network(nodes, state.get("ip_forward_before"))
    for node in nodes:
        host.remove_cgroups(node)
    keep_logs(nodes)
    if state.get("mounted_hugetlb"):
        host.unmount_hugetlb(state["mounted_hugetlb"])
    for path in [RUN_DIR, CONTROL_PLANE_DIR, CLUSTER_DIR / "nodes", CLUSTER_DIR / "state", Path("/tmp/hostpath_pv")]:
        shutil.rmtree(path, ignore_errors=True)
    for node in nodes:
        if node.kubelet_root == Path("/var/lib/kubelet") and (node.kubelet_root / ".kubeslurm-cluster").exists():
            shutil.rmtree(node.kubelet_root, ignore_errors=True)
    STATE_FILE.unlink(missing_ok=True)
    KUBECONFIG.unlink(missing_ok=True)


def keep_logs(nodes: list[Node]) -> None:
    """The control plane's and the pods' logs (the operator's, slurmctld's) move to LOGS:
    an e2e failure is explained by them."""
    cp_logs = CONTROL_PLANE_DIR / "logs"
    if cp_logs.is_dir():
        shutil.rmtree(LOGS / "control-plane", ignore_errors=True)
        LOGS.mkdir(parents=True, exist_ok=True)
        shutil.move(str(cp_logs), LOGS / "control-plane")
    for node in nodes:
        pod_logs = node.dir / "pod-logs"
        if pod_logs.is_dir():
            kept = LOGS / node.name / "pod-logs"
            shutil.rmtree(kept, ignore_errors=True)
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(pod_logs), kept)
    # kubelet links every container log into the host's /var/log/containers.
    for link in Path("/var/log/containers").glob("*.log"):
        if link.is_symlink() and str(os.readlink(link)).startswith(str(CLUSTER_DIR)):
            link.unlink(missing_ok=True)


def remove_pods(node: Node, crictl: Path | None) -> None:
    sock = node.containerd_socket
    crictl = crictl or next(iter(sorted((system_images.CACHE / "cluster" / "tools").glob("crictl-*"))), None)
    if not sock.exists() or crictl is None or not any(pids_with(str(node.containerd_config))):
        return
    # Only the network namespace matters to crictl's client, not to CNI
    # (containerd runs the plugins), but stay uniform.
    host.run([str(crictl), f"--runtime-endpoint=unix://{sock}", "--timeout=30s", "rmp", "--all", "--force"],
             check=False, timeout=120)


def kill_shims(node: Node) -> None:
    kill_pids(pids_with(str(node.containerd_socket)), signal.SIGKILL)
