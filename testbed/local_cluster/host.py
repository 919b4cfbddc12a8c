"""What the local cluster changes on this machine outside its folders, and undoes:
the node network (a bridge, a network namespace per node, routes, iptables rules),
cgroups (one root per node, the hugetlb controller) and mounts.

A node lives in a network namespace for the same reason kind puts it in a container:
its bridge, routes and the iptables rules of kube-proxy and CNI stay out of the host's,
and deleting the namespace removes them all at once. Only the network is namespaced:
mounts are the host's (the kubelet and containerd must see each other's mounts), so
`down` unmounts what they leave.
"""

from __future__ import annotations

import contextlib
import fcntl
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from testbed.local_cluster.layout import (
    CLUSTER_DIR,
    HOST_BRIDGE,
    HOST_IP,
    IPTABLES_COMMENT,
    NODE_NET,
    POD_CIDR,
    ClusterError,
    Node,
)
from testbed.processes import kill_pids


@contextlib.contextmanager
def exclusive():
    """One up/down at a time (two `make cluster-up` would trip over each other)."""
    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    with open(CLUSTER_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run(cmd: list, check: bool = True, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(map(str, cmd))} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def check_host() -> None:
    missing = [t for t in ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "iptables",
                           "nsenter", "ip", "gcc", "openssl") if not shutil.which(t)]
    missing += [f"/usr/lib/cni/{p}" for p in ("bridge", "host-local", "portmap", "loopback")
                if not Path("/usr/lib/cni", p).exists()]
    try:
        import grpc  # noqa: F401  (the fake GPU plugin runs with this interpreter)
    except ImportError:
        missing.append(f"grpcio for {sys.executable} (make venv)")
    if missing:
        raise ClusterError(
            f"missing on this host: {', '.join(missing)}; install them with\n"
            "  apt-get install containerd runc containernetworking-plugins iptables "
            "util-linux iproute2 gcc libc6-dev busybox-static openssl"
        )


# -- network -----------------------------------------------------------------------


def setup_network(nodes: list[Node], remember_ip_forward: Callable[[str], None]) -> None:
    """The bridge, a namespace per node with routes to every other node's pods, and
    masquerading of what leaves the cluster. remember_ip_forward gets ip_forward's value
    before it is changed, for remove_network."""
    run(["ip", "link", "add", HOST_BRIDGE, "type", "bridge"])
    run(["ip", "addr", "add", f"{HOST_IP}/{NODE_NET.prefixlen}", "dev", HOST_BRIDGE])
    run(["ip", "link", "set", HOST_BRIDGE, "up"])
    for node in nodes:
        run(["ip", "netns", "add", node.netns])
        run(["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns])
        run(["ip", "link", "set", node.host_veth, "master", HOST_BRIDGE, "up"])
        ns = ["ip", "-n", node.netns]
        run(ns + ["link", "set", "lo", "up"])
        run(ns + ["addr", "add", f"{node.ip}/{NODE_NET.prefixlen}", "dev", "eth0"])
        run(ns + ["link", "set", "eth0", "up"])
        run(ns + ["route", "add", "default", "via", HOST_IP])
        for other in nodes:
            if other != node:
                run(ns + ["route", "add", other.pod_subnet, "via", other.ip])
        # The host reaches every pod directly (handy with curl and for debugging).
        run(["ip", "route", "replace", node.pod_subnet, "via", node.ip])
        run(["ip", "netns", "exec", node.netns, "iptables", "-t", "nat", "-A", "POSTROUTING",
             "-s", node.pod_subnet, "!", "-d", str(POD_CIDR), "-j", "MASQUERADE",
             "-m", "comment", "--comment", f"{IPTABLES_COMMENT}: pods leaving the cluster"])
        # Per network namespace: forwarding for pods, bridged pod traffic
        # through iptables (kube-proxy's Service rules, hairpin).
        run(["ip", "netns", "exec", node.netns, "sysctl", "-q", "-w",
             "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"])
    # Egress from pods (CoreDNS forwarding names outside the cluster): the
    # node masquerades pods to its own address, the host masquerades nodes.
    remember_ip_forward(Path("/proc/sys/net/ipv4/ip_forward").read_text().strip())
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    comment = ["-m", "comment", "--comment", IPTABLES_COMMENT]
    run(["iptables", "-t", "nat", "-A", "POSTROUTING", "-s", str(NODE_NET), "!", "-o", HOST_BRIDGE,
         "-j", "MASQUERADE"] + comment)
    run(["iptables", "-I", "FORWARD", "-i", HOST_BRIDGE, "-j", "ACCEPT"] + comment)
    run(["iptables", "-I", "FORWARD", "-o", HOST_BRIDGE, "-j", "ACCEPT"] + comment)


def remove_network(nodes: list[Node], ip_forward_before: str | None) -> None:
    for node in nodes:
        run(["ip", "netns", "del", node.netns], check=False)
        run(["ip", "link", "del", node.host_veth], check=False)
        run(["ip", "route", "del", node.pod_subnet], check=False)
    run(["ip", "link", "del", HOST_BRIDGE], check=False)
    for table in ("nat", "filter"):
        saved = run(["iptables-save", "-t", table], check=False).stdout
        for line in saved.splitlines():
            if line.startswith("-A ") and f"--comment {IPTABLES_COMMENT}" in line:
                run(["iptables", "-t", table, "-D"] + shlex.split(line[3:]), check=False)
    if ip_forward_before is not None:
        Path("/proc/sys/net/ipv4/ip_forward").write_text(ip_forward_before)


# -- cgroups -----------------------------------------------------------------------


def cgroup_mounts() -> list[Path]:
    """Every cgroup hierarchy mounted under /sys/fs/cgroup (v1 controllers and v2)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        mnt = Path(left.split()[4])
        if fstype in ("cgroup", "cgroup2") and str(mnt).startswith("/sys/fs/cgroup"):
            out.append(mnt)
    return out


def mount_hugetlb() -> str | None:
    """Mounts the cgroup v1 hugetlb controller when the kernel has it unmounted; returns
    where (for unmount_hugetlb), or None.

    The kubelet gives every pod and container hugepage limits (0 unless asked)
    whenever the machine has hugepage sizes; runc's cgroup v1 driver then
    fails with "cannot set hugetlb limit: container could not join or create
    cgroup" if the controller is not mounted. Here it sits idle in the v2
    hierarchy; mounting it as v1 moves it, as on any systemd hybrid host.
    """
    if any(m.name == "hugetlb" for m in cgroup_mounts()):
        return None
    for line in Path("/proc/cgroups").read_text().splitlines()[1:]:
        name, hierarchy, _, enabled = line.split()
        if name == "hugetlb" and enabled == "1" and hierarchy == "0":
            target = Path("/sys/fs/cgroup/hugetlb")
            target.mkdir(exist_ok=True)
            run(["mount", "-t", "cgroup", "-o", "hugetlb", "cgroup", target])
            return str(target)
    return None


def unmount_hugetlb(target: str) -> None:
    if not [d for d in Path(target).iterdir() if d.is_dir()]:
        run(["umount", target], check=False)
        with contextlib.suppress(OSError):
            Path(target).rmdir()


def make_cgroups(node: Node) -> None:
    # The kubelet refuses a --cgroup-root that does not exist. cpuset
    # children start empty in cgroup v1: copy the parent's CPUs and memory nodes.
    for ctrl in cgroup_mounts():
        path = ctrl / node.cgroup_root.lstrip("/")
        for p in (path.parent, path):
            p.mkdir(exist_ok=True)
            if ctrl.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    if not (p / f).read_text().strip():
                        (p / f).write_text((p.parent / f).read_text())


def kill_cgroup(node: Node) -> None:
    """SIGKILL to every process in the node's cgroups (its containers), until none is left."""
    for _ in range(20):
        pids = set()
        for ctrl in cgroup_mounts():
            base = ctrl / node.cgroup_root.lstrip("/")
            if base.is_dir():
                for procs in base.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError):
                        pids.update(int(p) for p in procs.read_text().split())
        if not pids:
            return
        kill_pids(pids, signal.SIGKILL)
        time.sleep(0.25)


def remove_cgroups(node: Node) -> None:
    for ctrl in cgroup_mounts():
        base = ctrl / node.cgroup_root.lstrip("/")
        if not base.is_dir():
            continue
        for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            base.rmdir()
        with contextlib.suppress(OSError):
            base.parent.rmdir()  # /kubeslurm, once no node uses it


# -- mounts ------------------------------------------------------------------------


def mountpoints() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4]
        out.append(mnt.encode().decode("unicode_escape") if "\\" in mnt else mnt)
    return out


def unmount_below(prefixes: list[str]) -> None:
    """Unmounts everything at or below the prefixes, deepest first (lazily if busy)."""
    prefixes = [p.rstrip("/") for p in prefixes]
    for _ in range(3):
        targets = [m for m in mountpoints() if any(m == p or m.startswith(p + "/") for p in prefixes)]
        if not targets:
            return
        for target in sorted(targets, key=lambda m: -m.count("/")):
            if run(["umount", target], check=False).returncode != 0:
                run(["umount", "-l", target], check=False)
