"""A real local Kubernetes cluster on this machine, without Docker: the reality
ladder's rung 4 (see DESIGN.md).

    python -m e2e.cluster up|down|status      (make cluster-up / cluster-down / cluster-status)

What runs, all upstream at the version pinned in e2e/kubernetes/go.mod unless said:

  host        etcd, kube-apiserver (on HOST_IP:6443), kube-controller-manager
              (with its hostPath provisioner), kube-scheduler   -- control_plane.py
  per node    a network namespace `ksc-<node>` on the host bridge `ksc-nodes`,
              holding containerd (Debian's 1.6 + runc, its own root/state/socket,
              the CRI plugin with our pause image), the CNI bridge `ksc-cni0`
              (Debian's containernetworking-plugins: bridge + host-local +
              portmap, loopback), the kubelet (cgroupfs driver under its own
              cgroup root) and kube-proxy (iptables mode); the fake GPU device
              plugin (fake_gpu/) as a host process next to each kubelet
  in cluster  CoreDNS (Deployment + Service kube-dns at DNS_IP), a default
              StorageClass `standard`

A node lives in a network namespace for the same reason kind puts it in a
container: its bridge, routes and the iptables rules of kube-proxy and CNI stay
out of the host's, and deleting the namespace removes them all at once. Only
the network is namespaced: mounts are the host's (the kubelet and containerd
must see each other's mounts), so `down` unmounts what they leave.

Everything lives under CLUSTER_DIR (default /var/lib/kubeslurm-cluster, or
$KUBESLURM_CLUSTER_DIR) and RUN_DIR; the first node's kubelet uses the standard
/var/lib/kubelet so device plugins find it where they expect. The admin
kubeconfig is CLUSTER_DIR/admin.kubeconfig. The daemons are detached from the
process that started them; state.json records their PIDs, and `down` (or the
next `up`) stops exactly those, whatever state a killed run left.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import string
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import images
from e2e.cluster.control_plane import (
    REPO,
    ControlPlane,
    ControlPlaneError,
    build_kubernetes_binaries,
)

CLUSTER_DIR = Path(os.environ.get("KUBESLURM_CLUSTER_DIR", "/var/lib/kubeslurm-cluster"))
RUN_DIR = Path("/run/kubeslurm-cluster")
HERE = Path(__file__).resolve().parent

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
NODE_BINARIES = ("kube-scheduler", "kubelet", "kube-proxy")
DEFAULT_GPUS = 8
# Hard-coded in the kubelet (pluginapi.DevicePluginPath), whatever its --root-dir.
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"

# Kubernetes binaries this cluster needs on top of the API-server tier's.
ALL_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl") + NODE_BINARIES


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class Node:
    index: int  # 1-based

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
    def device_plugin_dir(self) -> Path:
        """Where this node's kubelet.sock and device plugin sockets are, seen from the host."""
        if self.index == 1:
            return Path(DEVICE_PLUGIN_DIR)
        return self.dir / "device-plugins"

    @property
    def cgroup_root(self) -> str:
        return f"/kubeslurm/{self.name}"


class LocalCluster:
    def __init__(self, nodes: int = 1, gpus_per_node: int = DEFAULT_GPUS, *, verbose: bool = True):
        self.nodes = [Node(i) for i in range(1, nodes + 1)]
        self.gpus_per_node = gpus_per_node
        self.verbose = verbose
        self.state_path = CLUSTER_DIR / "state.json"
        self.kubeconfig_path = CLUSTER_DIR / "admin.kubeconfig"
        self.bin_dir: Path | None = None
        self.tools: dict[str, Path] = {}

    # -- public ------------------------------------------------------------------

    def up(self) -> Path:
        """Starts the cluster (or finds it running); returns the admin kubeconfig path."""
        with _exclusive():
            return self._up()

    def down(self, quiet: bool = False) -> None:
        """Stops everything of this cluster and removes its state; safe to run anytime."""
        with _exclusive():
            self._down(quiet)

    def _up(self) -> Path:
        t0 = time.monotonic()
        if self.is_healthy():
            running = self._load().get("nodes", [])
            if len(running) != len(self.nodes):
                raise ClusterError(f"a cluster with {len(running)} node(s) is up; `make cluster-down` first "
                                   f"to start one with {len(self.nodes)}")
            self._say(f"cluster already up; kubeconfig: {self.kubeconfig_path}")
            return self.kubeconfig_path
        if os.geteuid() != 0:
            raise ClusterError("the local cluster needs root (network namespaces, mounts, cgroups)")
        self._check_host()
        self._down(quiet=True)  # whatever a killed or half-started run left
        shutil.rmtree(CLUSTER_DIR / "logs", ignore_errors=True)
        self._say("building or finding the binaries and images")
        self.bin_dir = build_kubernetes_binaries(*ALL_BINARIES)
        self.tools = images.build_all()
        t_built = time.monotonic()
        CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
        (CLUSTER_DIR / "logs").mkdir(exist_ok=True)
        state = {"bin_dir": str(self.bin_dir), "nodes": [n.name for n in self.nodes],
                 "gpus_per_node": self.gpus_per_node, "procs": [], "started": time.time()}
        self._save(state)
        try:
            self._mount_hugetlb(state)
            self._say("network: bridge, node namespaces")
            self._setup_host_network(state)
            self._say("control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler")
            cp = self._start_control_plane(state)
            for node in self.nodes:
                self._say(f"node {node.name}: containerd, kubelet, kube-proxy, fake GPU plugin")
                self._start_node(cp, node, state)
            self._wait_nodes_ready()
            self._say("addons: CoreDNS, default StorageClass")
            self._apply_addons()
            self._wait_coredns()
        except BaseException:
            self._say(f"start failed; logs: {CLUSTER_DIR / 'logs'} and {CLUSTER_DIR / 'control-plane' / 'logs'}")
            self._stop_processes(state)
            raise
        state["up_seconds"] = round(time.monotonic() - t_built, 1)
        self._save(state)
        self._say(
            f"cluster up in {time.monotonic() - t0:.0f}s "
            f"(start {state['up_seconds']:.0f}s after builds); kubeconfig: {self.kubeconfig_path}\n"
            f"  export KUBECONFIG={self.kubeconfig_path}"
        )
        return self.kubeconfig_path

    def _down(self, quiet: bool) -> None:
        state = self._load()
        nodes = [Node(int(n.rsplit("-", 1)[1])) for n in state.get("nodes", [])] or self.nodes
        # Nodes a previous run may have had beyond the ones recorded.
        known = {n.name for n in nodes}
        nodes += [Node(i) for i in range(1, 9) if f"kubeslurm-{i}" not in known
                  and Path(f"/run/netns/ksc-kubeslurm-{i}").exists()]
        if not quiet:
            self._say("stopping the cluster")
        # 1. The kubelets and plugins first, so nothing restarts pods behind us.
        self._stop_processes(state, only=("kubelet", "kube-proxy", "fake-gpu"))
        # 2. Pod sandboxes through CRI, so CNI releases addresses and rules.
        for node in nodes:
            self._remove_pods(node)
        # 3. Everything else we started: containerd, the control plane.
        self._stop_processes(state)
        # 4. What outlives containerd: shims and containers.
        for node in nodes:
            self._kill_shims(node)
            self._kill_cgroup(node)
        # 5. Mounts, namespaces, links, rules, files.
        self._unmount_all(nodes)
        for node in nodes:
            _run(["ip", "netns", "del", node.netns], check=False)
            _run(["ip", "link", "del", node.host_veth], check=False)
            _run(["ip", "route", "del", node.pod_subnet], check=False)
        _run(["ip", "link", "del", HOST_BRIDGE], check=False)
        self._delete_host_rules()
        if "ip_forward_before" in state:
            Path("/proc/sys/net/ipv4/ip_forward").write_text(state["ip_forward_before"])
        for node in nodes:
            self._remove_cgroups(node)
        # Logs stay for a post-mortem until the next `up`.
        cp_logs = CLUSTER_DIR / "control-plane" / "logs"
        if cp_logs.is_dir():
            shutil.rmtree(CLUSTER_DIR / "logs" / "control-plane", ignore_errors=True)
            (CLUSTER_DIR / "logs").mkdir(parents=True, exist_ok=True)
            shutil.move(str(cp_logs), CLUSTER_DIR / "logs" / "control-plane")
        # Pod logs too (the operator's, slurmctld's): an e2e failure is explained by them.
        for node in nodes:
            pod_logs = node.dir / "pod-logs"
            if pod_logs.is_dir():
                kept = CLUSTER_DIR / "logs" / node.name / "pod-logs"
                shutil.rmtree(kept, ignore_errors=True)
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(pod_logs), kept)
        # kubelet links every container log into the host's /var/log/containers.
        for link in Path("/var/log/containers").glob("*.log"):
            if link.is_symlink() and str(os.readlink(link)).startswith(str(CLUSTER_DIR)):
                link.unlink(missing_ok=True)
        if state.get("mounted_hugetlb"):
            target = state["mounted_hugetlb"]
            if not [d for d in Path(target).iterdir() if d.is_dir()]:
                _run(["umount", target], check=False)
                with contextlib.suppress(OSError):
                    Path(target).rmdir()
        for path in [RUN_DIR, CLUSTER_DIR / "control-plane", CLUSTER_DIR / "nodes",
                     CLUSTER_DIR / "state", Path("/tmp/hostpath_pv")]:
            shutil.rmtree(path, ignore_errors=True)
        for node in nodes:
            if node.kubelet_root == Path("/var/lib/kubelet") and (node.kubelet_root / ".kubeslurm-cluster").exists():
                shutil.rmtree(node.kubelet_root, ignore_errors=True)
        for name in ("state.json", "admin.kubeconfig"):
            (CLUSTER_DIR / name).unlink(missing_ok=True)
        if not quiet:
            self._say("cluster down")

    def load_images(self, tars: list[Path]) -> None:
        """Imports docker-archive tars into every node's containerd (namespace k8s.io).

        Pods then run them without pulling, as long as their imagePullPolicy is
        not Always (a tag other than `latest` defaults to IfNotPresent).
        """
        state = self._load()
        if not self.is_healthy():
            raise ClusterError("the cluster is not up: make cluster-up")
        for name in state["nodes"]:
            if name in state.get("powered_off", []):
                continue
            node = Node(int(name.rsplit("-", 1)[1]))
            # Beside containerd's content store, so it goes when that goes. Tars are named by
            # content (images/build.py), so a name seen before is an image already imported.
            seen_file = node.dir / "containerd" / "root" / "kubeslurm-imported-tars"
            seen = set(seen_file.read_text().split()) if seen_file.exists() else set()
            for tar in tars:
                key = f"{Path(tar).name}:{Path(tar).stat().st_size}"
                if key in seen:
                    self._say(f"{name}: already has {tar}")
                    continue
                _run(["ctr", "-a", node.containerd_socket, "-n", "k8s.io", "images", "import", tar], timeout=600)
                seen.add(key)
                seen_file.write_text("\n".join(sorted(seen)) + "\n")
                self._say(f"{name}: imported {tar}")

    def power_off(self, name: str) -> None:
        """Node loss, as when a machine dies: the node's kubelet, kube-proxy, GPU plugin,
        containerd and every container are SIGKILLed at once. Its Node object stays (the
        control plane sees the kubelet stop reporting); what the kernel holds for it
        (network namespace, mounts) stays until `down`. The cluster counts as healthy without it."""
        state = self._load()
        if name not in state.get("nodes", []):
            raise ClusterError(f"no node {name} in this cluster (nodes: {', '.join(state.get('nodes', []))})")
        node = Node(int(name.rsplit("-", 1)[1]))
        for proc in state["procs"]:
            if proc.get("node") == name and _alive_with(proc["pid"], proc["marker"]):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc["pid"], signal.SIGKILL)
        self._kill_shims(node)
        self._kill_cgroup(node)
        state["powered_off"] = sorted(set(state.get("powered_off", [])) | {name})
        self._save(state)
        self._say(f"{name}: powered off")

    def status(self) -> dict:
        state = self._load()
        procs = []
        for p in state.get("procs", []):
            alive = _alive_with(p["pid"], p["marker"])
            procs.append({**p, "alive": alive, "rss_mib": round(_rss(p["pid"]) / 2**20) if alive else 0})
        shims = [pid for n in state.get("nodes", []) for pid in _pids_with(str(RUN_DIR / n / "containerd.sock"))]
        out = {
            "kubeconfig": str(self.kubeconfig_path) if self.kubeconfig_path.exists() else None,
            "healthy": self.is_healthy(),
            "processes": procs,
            "shims": len(shims),
            "shims_rss_mib": round(sum(_rss(p) for p in shims) / 2**20),
        }
        if out["healthy"]:
            out["nodes"] = self.kubectl("get", "nodes", "-o", "wide", check=False).stdout
            out["pods"] = self.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        return out

    def is_healthy(self) -> bool:
        state = self._load()
        if not state.get("procs") or not self.kubeconfig_path.exists() or "up_seconds" not in state:
            return False
        lost = set(state.get("powered_off", []))
        if not all(_alive_with(p["pid"], p["marker"]) for p in state["procs"] if p.get("node") not in lost):
            return False
        self.bin_dir = Path(state["bin_dir"])
        result = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        return result.returncode == 0

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        bin_dir = self.bin_dir or Path(self._load().get("bin_dir", ""))
        cmd = [str(bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig_path}", *args]
        result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} exited {result.returncode}:\n"
                               f"{result.stderr.strip()}\n{result.stdout.strip()}")
        return result

    # -- host ---------------------------------------------------------------------

    def _mount_hugetlb(self, state: dict) -> None:
        """Mounts the cgroup v1 hugetlb controller when the kernel has it unmounted.

        The kubelet gives every pod and container hugepage limits (0 unless asked)
        whenever the machine has hugepage sizes; runc's cgroup v1 driver then
        fails with "cannot set hugetlb limit: container could not join or create
        cgroup" if the controller is not mounted. Here it sits idle in the v2
        hierarchy; mounting it as v1 moves it, as on any systemd hybrid host.
        """
        if any(m.name == "hugetlb" for m in _cgroup_mounts()):
            return
        for line in Path("/proc/cgroups").read_text().splitlines()[1:]:
            name, hierarchy, _, enabled = line.split()
            if name == "hugetlb" and enabled == "1" and hierarchy == "0":
                target = Path("/sys/fs/cgroup/hugetlb")
                target.mkdir(exist_ok=True)
                _run(["mount", "-t", "cgroup", "-o", "hugetlb", "cgroup", target])
                state["mounted_hugetlb"] = str(target)
                self._save(state)


    def _check_host(self) -> None:
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

    def _setup_host_network(self, state: dict) -> None:
        _run(["ip", "link", "add", HOST_BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "add", f"{HOST_IP}/{NODE_NET.prefixlen}", "dev", HOST_BRIDGE])
        _run(["ip", "link", "set", HOST_BRIDGE, "up"])
        for node in self.nodes:
            _run(["ip", "netns", "add", node.netns])
            _run(["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", "eth0",
                  "netns", node.netns])
            _run(["ip", "link", "set", node.host_veth, "master", HOST_BRIDGE, "up"])
            ns = ["ip", "-n", node.netns]
            _run(ns + ["link", "set", "lo", "up"])
            _run(ns + ["addr", "add", f"{node.ip}/{NODE_NET.prefixlen}", "dev", "eth0"])
            _run(ns + ["link", "set", "eth0", "up"])
            _run(ns + ["route", "add", "default", "via", HOST_IP])
            for other in self.nodes:
                if other != node:
                    _run(ns + ["route", "add", other.pod_subnet, "via", other.ip])
            # The host reaches every pod directly (handy with curl and for debugging).
            _run(["ip", "route", "replace", node.pod_subnet, "via", node.ip])
            _run(["ip", "netns", "exec", node.netns, "iptables", "-t", "nat", "-A", "POSTROUTING",
                  "-s", node.pod_subnet, "!", "-d", str(POD_CIDR), "-j", "MASQUERADE",
                  "-m", "comment", "--comment", f"{IPTABLES_COMMENT}: pods leaving the cluster"])
            # Per network namespace: forwarding for pods, bridged pod traffic
            # through iptables (kube-proxy's Service rules, hairpin).
            _run(["ip", "netns", "exec", node.netns, "sysctl", "-q", "-w",
                  "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"])
        # Egress from pods (CoreDNS forwarding names outside the cluster): the
        # node masquerades pods to its own address, the host masquerades nodes.
        state["ip_forward_before"] = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
        self._save(state)
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
        comment = ["-m", "comment", "--comment", IPTABLES_COMMENT]
        _run(["iptables", "-t", "nat", "-A", "POSTROUTING", "-s", str(NODE_NET), "!", "-o", HOST_BRIDGE,
              "-j", "MASQUERADE"] + comment)
        _run(["iptables", "-I", "FORWARD", "-i", HOST_BRIDGE, "-j", "ACCEPT"] + comment)
        _run(["iptables", "-I", "FORWARD", "-o", HOST_BRIDGE, "-j", "ACCEPT"] + comment)

    def _delete_host_rules(self) -> None:
        for table in ("nat", "filter"):
            saved = _run(["iptables-save", "-t", table], check=False).stdout
            for line in saved.splitlines():
                if line.startswith("-A ") and f"--comment {IPTABLES_COMMENT}" in line:
                    _run(["iptables", "-t", table] + ["-D"] + _split_rule(line[3:]), check=False)

    # -- control plane -----------------------------------------------------------

    def _start_control_plane(self, state: dict) -> ControlPlane:
        cp = ControlPlane(
            CLUSTER_DIR / "control-plane",
            self.bin_dir,
            service_cluster_ip_range=SERVICE_CIDR,
            advertise_address=HOST_IP,
            bind_address=HOST_IP,
            apiserver_port=APISERVER_PORT,
            scheduler=True,
            detach=True,
            keep_workdir=True,
            state_dir=CLUSTER_DIR / "state",
            extra_apiserver_args=[
                # Kubelets' serving certificates are signed by the cluster CA
                # (below), so the API server verifies them on logs/exec.
                f"--kubelet-certificate-authority={CLUSTER_DIR / 'control-plane' / 'pki' / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP",
                # A long-lived cluster: keep the audit log bounded.
                "--audit-log-maxsize=100",
                "--audit-log-maxbackup=1",
            ],
            extra_controller_manager_args=["--enable-hostpath-provisioner=true"],
        )
        try:
            cp.start()
        finally:
            # start() records the PIDs even when it fails half-way.
            for proc in cp._procs:
                self._record(state, proc.name, proc.popen.pid, str(cp.workdir))
        shutil.copy(cp.kubeconfig_path, self.kubeconfig_path)
        self.kubeconfig_path.chmod(0o600)
        return cp

    # -- nodes -------------------------------------------------------------------

    def _start_node(self, cp: ControlPlane, node: Node, state: dict) -> None:
        d = node.dir
        for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "kube-proxy", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        node.run_dir.mkdir(parents=True, exist_ok=True)
        self._make_cgroups(node)
        self._write_cni_config(node)
        self._start_containerd(node, state)
        self._import_images(node)
        self._prepare_kubelet_root(node)
        self._start_kubelet(cp, node, state)
        self._start_kube_proxy(cp, node, state)
        self._start_fake_gpu(node, state)

    def _make_cgroups(self, node: Node) -> None:
        # The kubelet refuses a --cgroup-root that does not exist. cpuset
        # children start empty in cgroup v1: copy the parent's CPUs and memory nodes.
        for ctrl in _cgroup_mounts():
            path = ctrl / node.cgroup_root.lstrip("/")
            for p in (path.parent, path):
                p.mkdir(exist_ok=True)
                if ctrl.name == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not (p / f).read_text().strip():
                            (p / f).write_text((p.parent / f).read_text())

    def _write_cni_config(self, node: Node) -> None:
        conf = {
            "cniVersion": "1.0.0",
            "name": "kubeslurm",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": CNI_BRIDGE,
                    "isGateway": True,
                    # Masquerading is ours (_setup_host_network): only traffic
                    # leaving the cluster, so pods see each other's real
                    # addresses across nodes (Slurm connects back to them).
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": node.pod_subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(node.dir / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (node.dir / "cni" / "net.d" / "10-kubeslurm.conflist").write_text(json.dumps(conf, indent=2))

    def _containerd_config(self, node: Node) -> str:
        return CONTAINERD_CONFIG.substitute(
            root=node.dir / "containerd" / "root",
            state=node.run_dir / "containerd",
            socket=node.containerd_socket,
            opt=node.dir / "containerd" / "opt",
            pause=images.PAUSE_IMAGE,
            cni_conf=node.dir / "cni" / "net.d",
        )

    def _start_containerd(self, node: Node, state: dict) -> None:
        config = node.dir / "containerd" / "config.toml"
        config.write_text(self._containerd_config(node))
        self._spawn(state, "containerd", ["containerd", "--config", str(config)], node, marker=str(config))
        _wait_for(lambda: _run(["ctr", "-a", str(node.containerd_socket), "version"], check=False).returncode == 0,
                  60, f"containerd of {node.name}", self._log(node, "containerd"))

    def _import_images(self, node: Node) -> None:
        for name in ("pause", "busybox", "coredns"):
            # Unpacked into the overlayfs snapshotter, where the CRI plugin looks.
            _run(["ctr", "-a", node.containerd_socket, "-n", "k8s.io", "images", "import", self.tools[name]])

    def _prepare_kubelet_root(self, node: Node) -> None:
        root = node.kubelet_root
        if root == Path("/var/lib/kubelet") and root.exists() and any(root.iterdir()) \
                and not (root / ".kubeslurm-cluster").exists():
            raise ClusterError(f"{root} holds another kubelet's data; not touching it")
        root.mkdir(parents=True, exist_ok=True)
        (root / ".kubeslurm-cluster").write_text("made by kubeslurm's local cluster; removed by `make cluster-down`\n")
        # Volume mounts made by the kubelet must propagate into containers; the
        # host's / is private here, so the kubelet root becomes its own shared mount.
        _run(["mount", "--bind", str(root), str(root)])
        _run(["mount", "--make-rshared", str(root)])

    def _start_kubelet(self, cp: ControlPlane, node: Node, state: dict) -> None:
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
            f"--pod-infra-container-image={images.PAUSE_IMAGE}",
            f"--node-labels=kubeslurm.local/node-index={node.index}",
            "--v=1",
        ]
        if node.index > 1:
            argv = _own_device_plugin_dir(node) + argv
        self._spawn(state, "kubelet", argv, node, marker=str(config))

    def _start_kube_proxy(self, cp: ControlPlane, node: Node, state: dict) -> None:
        pdir = node.dir / "kube-proxy"
        if not (cp.pki / "kube-proxy.crt").exists():
            cp.sign_client_cert("kube-proxy", "system:kube-proxy")
        kubeconfig = cp.write_kubeconfig(pdir / "kubeconfig", "kube-proxy", "system:kube-proxy")
        config = pdir / "config.yaml"
        config.write_text(KUBE_PROXY_CONFIG.substitute(
            kubeconfig=kubeconfig, cluster_cidr=POD_CIDR, node=node.name, node_ip=node.ip,
        ))
        self._spawn(state, "kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={config}", "--v=1"],
                    node, marker=str(config))

    def _start_fake_gpu(self, node: Node, state: dict) -> None:
        if self.gpus_per_node <= 0:
            return
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._spawn(state, "fake-gpu", [
            sys.executable, "-m", "e2e.cluster.fake_gpu",
            f"--node-name={node.name}",
            f"--count={self.gpus_per_node}",
            f"--device-dir={node.dir / 'dev'}",
            f"--plugin-dir={node.device_plugin_dir}",
        ], None, marker=str(node.dir / "dev"), log_node=node, env=env)

    def _wait_nodes_ready(self, timeout: float = 120) -> None:
        names = {n.name for n in self.nodes}

        def ready() -> bool:
            out = self.kubectl("get", "nodes", "-o", "json", check=False)
            if out.returncode != 0:
                return False
            ok = set()
            for item in json.loads(out.stdout)["items"]:
                conds = {c["type"]: c["status"] for c in item["status"].get("conditions", [])}
                gpus = item["status"].get("allocatable", {}).get("nvidia.com/gpu", "0")
                if conds.get("Ready") == "True" and (self.gpus_per_node == 0 or int(gpus) == self.gpus_per_node):
                    ok.add(item["metadata"]["name"])
            return names <= ok

        _wait_for(ready, timeout, "nodes Ready with their fake GPUs",
                  *(self._log(n, "kubelet") for n in self.nodes))

    def _apply_addons(self) -> None:
        coredns = string.Template((HERE / "addons" / "coredns.yaml").read_text()).substitute(
            IMAGE=images.COREDNS_IMAGE, DNS_IP=DNS_IP, DOMAIN=DOMAIN, REPLICAS=min(2, len(self.nodes)))
        self.kubectl("apply", "-f", "-", input=coredns)
        self.kubectl("apply", "-f", str(HERE / "addons" / "storage.yaml"))

    def _wait_coredns(self, timeout: float = 120) -> None:
        def ready() -> bool:
            out = self.kubectl("-n", "kube-system", "get", "deploy", "coredns", "-o", "json", check=False)
            if out.returncode != 0:
                return False
            st = json.loads(out.stdout).get("status", {})
            return st.get("readyReplicas", 0) >= 1

        _wait_for(ready, timeout, "CoreDNS ready", *(self._log(n, "kubelet") for n in self.nodes))

    # -- teardown helpers --------------------------------------------------------

    def _remove_pods(self, node: Node) -> None:
        sock = node.containerd_socket
        crictl = self.tools.get("crictl") or next(iter(sorted((images.CACHE / "cluster" / "tools").glob("crictl-*"))), None)
        if not sock.exists() or crictl is None or not any(_pids_with(str(node.dir / "containerd" / "config.toml"))):
            return
        # Only the network namespace matters to crictl's client, not to CNI
        # (containerd runs the plugins), but stay uniform.
        _run([str(crictl), f"--runtime-endpoint=unix://{sock}", "--timeout=30s", "rmp", "--all", "--force"],
             check=False, timeout=120)

    def _kill_shims(self, node: Node) -> None:
        for pid in _pids_with(str(node.containerd_socket)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _kill_cgroup(self, node: Node) -> None:
        for _ in range(20):
            pids = set()
            for ctrl in _cgroup_mounts():
                base = ctrl / node.cgroup_root.lstrip("/")
                if base.is_dir():
                    for procs in base.rglob("cgroup.procs"):
                        with contextlib.suppress(OSError):
                            pids.update(int(p) for p in procs.read_text().split())
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.25)

    def _remove_cgroups(self, node: Node) -> None:
        for ctrl in _cgroup_mounts():
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

    def _unmount_all(self, nodes: list[Node]) -> None:
        prefixes = [str(CLUSTER_DIR), str(RUN_DIR)] + [str(n.kubelet_root) for n in nodes]
        prefixes = [p.rstrip("/") for p in prefixes]
        for _ in range(3):
            targets = [m for m in _mountpoints()
                       if any(m == p or m.startswith(p + "/") for p in prefixes)]
            if not targets:
                return
            for target in sorted(targets, key=lambda m: -m.count("/")):
                if _run(["umount", target], check=False).returncode != 0:
                    _run(["umount", "-l", target], check=False)

    def _stop_processes(self, state: dict, only: tuple[str, ...] | None = None) -> None:
        procs = [p for p in reversed(state.get("procs", [])) if only is None or p["name"] in only]
        for p in procs:
            if _alive_with(p["pid"], p["marker"]):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in procs:
            while _alive_with(p["pid"], p["marker"]) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive_with(p["pid"], p["marker"]):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p["pid"], signal.SIGKILL)
        # Daemons of a run whose state file is gone: found by the paths in their
        # command lines (and their names, so an editor open on a config survives).
        if only is None:
            for marker in (str(CLUSTER_DIR / "control-plane"), str(CLUSTER_DIR / "nodes")):
                for pid in _pids_with(marker):
                    if _comm(pid) in DAEMON_NAMES or _comm(pid).startswith("python"):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)

    # -- small helpers -----------------------------------------------------------

    def _spawn(self, state: dict, name: str, argv: list[str], node: Node | None, *, marker: str,
               log_node: Node | None = None, env: dict | None = None) -> int:
        log_node = log_node or node
        log = self._log(log_node, name) if log_node else CLUSTER_DIR / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if node is not None:
            # Only the network namespace: mounts must stay shared with the host.
            argv = ["nsenter", f"--net=/run/netns/{node.netns}", "--", *argv]
        with log.open("ab") as out:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=str(REPO), env=env)
        self._record(state, name, popen.pid, marker, node=log_node.name if log_node else None)
        time.sleep(0.2)
        if popen.poll() is not None:
            raise ClusterError(f"{name} exited at once with code {popen.returncode}; see {log}:\n{_tail(log)}")
        return popen.pid

    def _record(self, state: dict, name: str, pid: int, marker: str, node: str | None = None) -> None:
        state["procs"].append({"name": name, "pid": pid, "marker": marker, "node": node})
        self._save(state)

    def _log(self, node: Node, name: str) -> Path:
        return CLUSTER_DIR / "logs" / node.name / f"{name}.log"

    def _load(self) -> dict:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_path)

    def _say(self, msg: str) -> None:
        if self.verbose:
            print(f"cluster: {msg}", flush=True)


# -- configuration templates ------------------------------------------------------

CONTAINERD_CONFIG = string.Template("""\
# containerd 1.6 (Debian bookworm) for one node of kubeslurm's local cluster.
version = 2
root = "$root"
state = "$state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$socket"

[ttrpc]
  address = "$socket.ttrpc"

[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = "$opt"

[plugins."io.containerd.grpc.v1.cri"]
  # Built locally and imported: no registry is reachable.
  sandbox_image = "$pause"
  # No AppArmor/SELinux on this host.
  disable_apparmor = true
  enable_selinux = false
  # Pod network namespaces under this containerd's state dir, not /run/netns,
  # so `down` finds exactly ours.
  netns_mounts_under_state_dir = true
  # This machine withholds CAP_SYS_RESOURCE even from root, so runc cannot
  # lower oom_score_adj (the kubelet asks -998 for sandboxes): "can't get final
  # child's PID from pipe: EOF". Clamp to containerd's own value instead.
  restrict_oom_score_adj = true
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        # cgroupfs, like the kubelet: there is no systemd on this machine.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$cni_conf"
    max_conf_num = 1
""")

KUBELET_CONFIG = string.Template("""\
# kubelet 1.30 of one node of kubeslurm's local cluster.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $address
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $ca}
authorization:
  mode: Webhook
tlsCertFile: $cert
tlsPrivateKeyFile: $key
containerRuntimeEndpoint: $runtime
clusterDNS: [$dns_ip]
clusterDomain: $domain
resolvConf: /etc/resolv.conf
podCIDR: $pod_cidr
# Not the default /var/log/pods: two kubelets on one host would each treat the
# other's log directories as orphans and delete them.
podLogsDir: $pod_logs_dir
# No systemd here; cgroup v1 controllers (the v2 tree at /sys/fs/cgroup/unified
# is ignored). Each node gets its own cgroup root so two kubelets on one host
# do not manage each other's pods.
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: $cgroup_root
enforceNodeAllocatable: [pods]
failSwapOn: false
protectKernelDefaults: false
# A shared development disk: evict late, never garbage-collect the imported
# images (they cannot be pulled again).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  nodefs.inodesFree: 2%
  imagefs.available: 2%
serializeImagePulls: false
maxPods: 110
rotateCertificates: false
serverTLSBootstrap: false
""")

KUBE_PROXY_CONFIG = string.Template("""\
# kube-proxy 1.30, iptables mode, inside the node's network namespace.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $kubeconfig
clusterCIDR: $cluster_cidr
hostnameOverride: $node
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# conntrack sysctls are global or read-only outside the initial network
# namespace: leave them as they are (0 = do not touch).
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
""")


# -- process and system helpers ---------------------------------------------------


@contextlib.contextmanager
def _exclusive():
    """One up/down at a time (two `make cluster-up` would trip over each other)."""
    import fcntl

    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    with open(CLUSTER_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(cmd: list, check: bool = True, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(map(str, cmd))} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _wait_for(pred, timeout: float, what: str, *logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    tails = "\n".join(f"--- {log}:\n{_tail(log)}" for log in logs)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


DAEMON_NAMES = {"etcd", "kube-apiserver", "kube-controller", "kube-scheduler", "kubelet", "kube-proxy",
                "containerd", "nsenter", "unshare", "sh"}  # comm is cut at 15 characters


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive_with(pid: int, marker: str) -> bool:
    """pid runs and its command line still names marker (PIDs get reused)."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (OSError, IndexError):
        return False
    return marker in _cmdline(pid)


def _pids_with(marker: str) -> list[int]:
    me = os.getpid()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me and marker in _cmdline(int(entry.name)):
            out.append(int(entry.name))
    return out


def _rss(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


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


def _cgroup_mounts() -> list[Path]:
    """Every cgroup hierarchy mounted under /sys/fs/cgroup (v1 controllers and v2)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        mnt = Path(left.split()[4])
        if fstype in ("cgroup", "cgroup2") and str(mnt).startswith("/sys/fs/cgroup"):
            out.append(mnt)
    return out


def _mountpoints() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4]
        out.append(mnt.encode().decode("unicode_escape") if "\\" in mnt else mnt)
    return out


def _split_rule(rule: str) -> list[str]:
    import shlex

    return shlex.split(rule)


# -- command line ------------------------------------------------------------------


def _existing_kubeconfig_cluster() -> str | None:
    """The user's own cluster, when KUBECONFIG names one that answers."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig or Path(kubeconfig).resolve() == (CLUSTER_DIR / "admin.kubeconfig").resolve():
        return None
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        try:
            kubectl = str(build_kubernetes_binaries("kubectl", stream_output=False) / "kubectl")
        except ControlPlaneError:
            return None
    result = subprocess.run([kubectl, "get", "--raw", "/readyz"], capture_output=True, text=True,
                            timeout=20, env=dict(os.environ))
    return kubeconfig if result.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description="kubeslurm's local Kubernetes cluster")
    parser.add_argument("command", choices=("up", "down", "status", "load"))
    parser.add_argument("tars", nargs="*", type=Path, help="load: docker-archive tars to import on every node")
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("KUBESLURM_CLUSTER_NODES", "1")))
    parser.add_argument("--gpus", type=int, default=int(os.environ.get("KUBESLURM_CLUSTER_GPUS", str(DEFAULT_GPUS))),
                        help="fake GPUs per node (nvidia.com/gpu)")
    parser.add_argument("--json", action="store_true", help="status as JSON")
    args = parser.parse_args(argv)
    cluster = LocalCluster(nodes=args.nodes, gpus_per_node=args.gpus)
    try:
        if args.command == "up":
            existing = _existing_kubeconfig_cluster()
            if existing:
                print(f"cluster: KUBECONFIG={existing} answers; using that cluster, starting none")
                return 0
            cluster.up()
        elif args.command == "down":
            cluster.down()
        elif args.command == "load":
            cluster.load_images(args.tars)
        else:
            st = cluster.status()
            if args.json:
                print(json.dumps(st, indent=2))
            else:
                print(f"kubeconfig: {st['kubeconfig'] or '(none: cluster is down)'}")
                print(f"healthy: {st['healthy']}")
                total = 0
                for p in st["processes"]:
                    total += p["rss_mib"]
                    where = f" [{p['node']}]" if p.get("node") else ""
                    print(f"  {p['name']:<24}{where:<16} pid {p['pid']:<8} "
                          f"{'running' if p['alive'] else 'DEAD':<8} {p['rss_mib']:>5} MiB")
                print(f"  {'containerd shims':<40} {st['shims']:>3} procs {st['shims_rss_mib']:>7} MiB")
                print(f"  total (daemons): {total} MiB")
                if st.get("nodes"):
                    print(st["nodes"].rstrip())
                    print(st["pods"].rstrip())
            return 0 if st["healthy"] else 1
    except (ClusterError, ControlPlaneError, images.ImageBuildError) as exc:
        print(f"cluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
