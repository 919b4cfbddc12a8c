"""LocalCluster: a real Kubernetes cluster on this machine, without Docker (the reality
ladder's rung 4, see DESIGN.md). README.md beside this file says what runs where.

    python -m testbed.local_cluster up|down|status|load   (make cluster-up / cluster-down / cluster-status)

The daemons are detached from the process that started them; the record in
CLUSTER_DIR/state.json (testbed/processes.py) names them, and `down` (or the next
`up`) stops exactly those, whatever state a killed run left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import string
import subprocess
import time
from pathlib import Path

from testbed.control_plane import ControlPlane, build_kubernetes_binaries
from testbed.kubectl import Kube
from testbed.local_cluster import host, system_images, teardown
from testbed.local_cluster.layout import (
    ALL_BINARIES,
    APISERVER_PORT,
    CONTROL_PLANE_DIR,
    DEFAULT_GPUS,
    DNS_IP,
    DOMAIN,
    HERE,
    HOST_IP,
    KUBECONFIG,
    LOGS,
    RUN_DIR,
    SERVICE_CIDR,
    STATE_FILE,
    ClusterError,
    Node,
)
from testbed.local_cluster.node import NodeStarter
from testbed.processes import Supervisor, argv_of, log_tails, pids_with, rss
from testbed.waiting import wait_for


@contextlib.contextmanager
def running_local_cluster(nodes: int = 1, *, min_nodes: int = 0, verbose: bool = True):
    """The one answer of the tests, the e2e suite and the benchmarks to "reuse a healthy
    local cluster or start one": a cluster that is already up (`make cluster-up`, `make
    demo`) is used and left running; otherwise one of `nodes` nodes is started and always
    stopped at the end, also when the caller fails. min_nodes: a running cluster with fewer
    nodes is an error (the caller needs that many), not silently used."""
    cluster = LocalCluster(nodes=nodes, verbose=verbose)
    if cluster.is_healthy():
        running = len(cluster.supervisor.load().get("nodes", []))
        if running < min_nodes:
            raise ClusterError(f"a local cluster with {running} node(s) is running; this needs {min_nodes}: "
                               "`make cluster-down` (or `make demo-down`) first")
        yield cluster
        return
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


class LocalCluster:
    def __init__(self, nodes: int = 1, gpus_per_node: int = DEFAULT_GPUS, *, verbose: bool = True):
        self.nodes = [Node(i) for i in range(1, nodes + 1)]
        self.gpus_per_node = gpus_per_node
        self.verbose = verbose
        self.supervisor = Supervisor(STATE_FILE)
        self.kubeconfig_path = KUBECONFIG
        self.bin_dir: Path | None = None
        self.tools: dict[str, Path] = {}

    # -- public ------------------------------------------------------------------

    def up(self) -> Path:
        """Starts the cluster (or finds it running); returns the admin kubeconfig path."""
        with host.exclusive():
            return self._up()

    def down(self, quiet: bool = False) -> None:
        """Stops everything of this cluster and removes its state; safe to run anytime."""
        with host.exclusive():
            self._down(quiet)

    def _up(self) -> Path:
        t0 = time.monotonic()
        if self.is_healthy():
            running = self.supervisor.load().get("nodes", [])
            if len(running) != len(self.nodes):
                raise ClusterError(f"a cluster with {len(running)} node(s) is up; `make cluster-down` first "
                                   f"to start one with {len(self.nodes)}")
            self._say(f"cluster already up; kubeconfig: {self.kubeconfig_path}")
            return self.kubeconfig_path
        if os.geteuid() != 0:
            raise ClusterError("the local cluster needs root (network namespaces, mounts, cgroups)")
        host.check_host()
        self._down(quiet=True)  # whatever a killed or half-started run left
        shutil.rmtree(LOGS, ignore_errors=True)
        self._say("building or finding the binaries and images")
        self.bin_dir = build_kubernetes_binaries(*ALL_BINARIES)
        self.tools = system_images.build_all()
        t_built = time.monotonic()
        LOGS.mkdir(parents=True, exist_ok=True)
        self.supervisor.save({"bin_dir": str(self.bin_dir), "nodes": [n.name for n in self.nodes],
                              "gpus_per_node": self.gpus_per_node, "procs": [], "started": time.time()})
        try:
            mounted = host.mount_hugetlb()
            if mounted:
                self.supervisor.update(mounted_hugetlb=mounted)
            self._say("network: bridge, node namespaces")
            host.setup_network(self.nodes, lambda before: self.supervisor.update(ip_forward_before=before))
            self._say("control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler")
            cp = self._start_control_plane()
            starter = NodeStarter(cp, self.supervisor, self.bin_dir, self.tools, self.gpus_per_node)
            for node in self.nodes:
                self._say(f"node {node.name}: containerd, kubelet, kube-proxy, fake GPU plugin")
                starter.start(node)
            self._wait_nodes_ready()
            self._say("addons: CoreDNS, default StorageClass, nodes may read volume sources")
            self._apply_addons()
            self._wait_coredns()
        except BaseException:
            self._say(f"start failed; logs: {LOGS} and {CONTROL_PLANE_DIR / 'logs'}")
            teardown.stop_daemons(self.supervisor)
            raise
        up_seconds = round(time.monotonic() - t_built, 1)
        self.supervisor.update(up_seconds=up_seconds)
        self._say(
            f"cluster up in {time.monotonic() - t0:.0f}s "
            f"(start {up_seconds:.0f}s after builds); kubeconfig: {self.kubeconfig_path}\n"
            f"  export KUBECONFIG={self.kubeconfig_path}"
        )
        return self.kubeconfig_path

    def _down(self, quiet: bool) -> None:
        nodes = teardown.recorded_nodes(self.supervisor.load(), self.nodes)
        if not quiet:
            self._say("stopping the cluster")
        teardown.tear_down(self.supervisor, nodes, self.tools.get("crictl"))
        if not quiet:
            self._say("cluster down")

    def load_images(self, tars: list[Path]) -> None:
        """Imports docker-archive tars into every node's containerd (namespace k8s.io).

        Pods then run them without pulling, as long as their imagePullPolicy is
        not Always (a tag other than `latest` defaults to IfNotPresent).
        """
        state = self.supervisor.load()
        if not self.is_healthy():
            raise ClusterError("the cluster is not up: make cluster-up")
        for name in state["nodes"]:
            if name in state.get("powered_off", []):
                continue
            node = Node.named(name)
            # Beside containerd's content store, so it goes when that goes. Tars are named by
            # content (images/build.py: <image>-<hash>.tar), so a name seen before is an image
            # already imported -- while its tag still points at it: every worktree builds under
            # the same tags, so importing slurm-<other>.tar moves the tag, and the tars of that
            # image seen before must be imported again.
            seen_file = node.dir / "containerd" / "root" / "kubeslurm-imported-tars"
            seen = set(seen_file.read_text().split()) if seen_file.exists() else set()
            for tar in tars:
                key = f"{Path(tar).name}:{Path(tar).stat().st_size}"
                if key in seen:
                    self._say(f"{name}: already has {tar}")
                    continue
                host.run(["ctr", "-a", node.containerd_socket, "-n", "k8s.io", "images", "import", tar], timeout=600)
                image = Path(tar).name.rsplit("-", 1)[0]
                seen = {other for other in seen if other.split(":")[0].rsplit("-", 1)[0] != image}
                seen.add(key)
                seen_file.write_text("\n".join(sorted(seen)) + "\n")
                self._say(f"{name}: imported {tar}")

    def tag_image(self, source: str, target: str) -> None:
        """Another tag for an image every node has (`ctr images tag`), as a registry would serve a
        new release: a Deployment changed to the new tag rolls its pods, which run without pulling."""
        self._each_node_containerd(["images", "tag", "--force", source, target])

    def untag_image(self, ref: str) -> None:
        """Removes a tag (the image stays while another tag names it)."""
        self._each_node_containerd(["images", "rm", ref], check=False)

    def _each_node_containerd(self, args: list[str], check: bool = True) -> None:
        state = self.supervisor.load()
        if not self.is_healthy():
            raise ClusterError("the cluster is not up: make cluster-up")
        for name in state["nodes"]:
            if name not in state.get("powered_off", []):
                host.run(["ctr", "-a", Node.named(name).containerd_socket, "-n", "k8s.io", *args], check=check)

    def power_off(self, name: str) -> None:
        """Node loss, as when a machine dies: the node's kubelet, kube-proxy, GPU plugin,
        containerd and every container are SIGKILLed at once. Its Node object stays (the
        control plane sees the kubelet stop reporting); what the kernel holds for it
        (network namespace, mounts) stays until `down`. The cluster counts as healthy without it."""
        state = self.supervisor.load()
        if name not in state.get("nodes", []):
            raise ClusterError(f"no node {name} in this cluster (nodes: {', '.join(state.get('nodes', []))})")
        teardown.power_off(self.supervisor, Node.named(name))
        self.supervisor.update(powered_off=sorted(set(state.get("powered_off", [])) | {name}))
        self._say(f"{name}: powered off")

    def power_on(self, name: str, timeout: float = 180) -> None:
        """Gives back a node that power_off took, as when the machine boots again: its
        containerd, kubelet, kube-proxy and GPU plugin start anew from their files, the kubelet
        registers its Node (again, if it was deleted meanwhile) and removes the dead pods'
        sandboxes; returns once the Node is Ready with its GPUs. A node that is on: nothing."""
        with host.exclusive():
            state = self.supervisor.load()
            if name not in state.get("nodes", []):
                raise ClusterError(f"no node {name} in this cluster (nodes: {', '.join(state.get('nodes', []))})")
            if name not in state.get("powered_off", []):
                self._say(f"{name}: already on")
                return
            if not self.is_healthy():
                raise ClusterError("the cluster is not up: make cluster-up")
            node = Node.named(name)
            # The dead daemons' records go; the new ones are recorded as they start.
            self.supervisor.stop(node=name, grace=0)
            self.bin_dir = Path(state["bin_dir"])
            self.tools = system_images.build_all()
            self.gpus_per_node = state.get("gpus_per_node", self.gpus_per_node)
            NodeStarter(self._control_plane(), self.supervisor, self.bin_dir, self.tools,
                        self.gpus_per_node).start(node)
            self.supervisor.update(powered_off=[n for n in state.get("powered_off", []) if n != name])
        self._wait_nodes_ready(timeout, names={name})
        self._say(f"{name}: powered on, Ready")

    def kill_container(self, container_id: str) -> int:
        """A container's main process SIGKILLed on its machine, as a crash or the OOM killer does:
        the pod stays, its kubelet restarts the container in place. container_id: the pod's
        status.containerStatuses[].containerID (containerd://ID). Returns the PID killed."""
        wanted = container_id.split("://")[-1]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if wanted not in (entry / "cgroup").read_text():
                    continue
                ns_pids = next(line.split()[1:] for line in (entry / "status").read_text().splitlines()
                               if line.startswith("NSpid:"))
                if ns_pids[-1] == "1":  # the container's own PID 1: its main process
                    os.kill(int(entry.name), signal.SIGKILL)
                    self._say(f"container {wanted[:12]}: main process {entry.name} killed")
                    return int(entry.name)
        raise ClusterError(f"no process of container {wanted} on this machine")

    @contextlib.contextmanager
    def api_server_stopped(self, timeout: float = 120):
        """etcd and kube-apiserver stopped (SIGTERM, as when the control-plane machine goes down)
        for the block, then started again with the same command lines, data and certificates;
        returns once /readyz answers. Kubelets, containers and what runs in them go on meanwhile."""
        names = ("etcd", "kube-apiserver")
        with host.exclusive():
            stopped = [(p, argv_of(p.pid), os.readlink(f"/proc/{p.pid}/cwd"))
                       for p in self.supervisor.processes() if p.name in names and self.supervisor.alive(p)]
            if [p.name for p, _, _ in stopped] != list(names):
                raise ClusterError(f"etcd and kube-apiserver are not both running: {[p.name for p, _, _ in stopped]}")
            self.supervisor.stop(only=names, grace=30)
            self._say("etcd and kube-apiserver stopped")
        try:
            yield
        finally:
            with host.exclusive():
                for p, argv, cwd in stopped:  # etcd first, as they were started
                    self.supervisor.spawn(p.name, argv, marker=p.marker, log=Path(p.log) if p.log else None,
                                          cwd=cwd, check_started=0.2)
            wait_for(lambda: self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0,
                     timeout, "kube-apiserver /readyz after its restart", error=ClusterError)
            self._say("etcd and kube-apiserver started again")

    def status(self) -> dict:
        state = self.supervisor.load()
        procs = []
        for p in self.supervisor.processes():
            alive = self.supervisor.alive(p)
            procs.append({"name": p.name, "pid": p.pid, "marker": p.marker, "node": p.node,
                          "alive": alive, "rss_mib": round(rss(p.pid) / 2**20) if alive else 0})
        shims = [pid for n in state.get("nodes", []) for pid in pids_with(str(RUN_DIR / n / "containerd.sock"))]
        out = {
            "kubeconfig": str(self.kubeconfig_path) if self.kubeconfig_path.exists() else None,
            "healthy": self.is_healthy(),
            "processes": procs,
            "shims": len(shims),
            "shims_rss_mib": round(sum(rss(p) for p in shims) / 2**20),
        }
        if out["healthy"]:
            out["nodes"] = self.kubectl("get", "nodes", "-o", "wide", check=False).stdout
            out["pods"] = self.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        return out

    def is_healthy(self) -> bool:
        state = self.supervisor.load()
        if not state.get("procs") or not self.kubeconfig_path.exists() or "up_seconds" not in state:
            return False
        lost = set(state.get("powered_off", []))
        if not all(self.supervisor.alive(p) for p in self.supervisor.processes() if p.node not in lost):
            return False
        self.bin_dir = Path(state["bin_dir"])
        result = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        return result.returncode == 0

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        bin_dir = self.bin_dir or Path(self.supervisor.load().get("bin_dir", ""))
        return Kube(str(self.kubeconfig_path), str(bin_dir / "kubectl")).run(
            *args, check=check, input=input, timeout=timeout)

    # -- starting ----------------------------------------------------------------

    def _start_control_plane(self) -> ControlPlane:
        cp = self._control_plane()
        cp.start()
        shutil.copy(cp.kubeconfig_path, self.kubeconfig_path)
        self.kubeconfig_path.chmod(0o600)
        return cp

    def _control_plane(self) -> ControlPlane:
        """The cluster's control plane, started or not (a node powered on again signs with its CA)."""
        return ControlPlane(
            CONTROL_PLANE_DIR,
            self.bin_dir,
            service_cluster_ip_range=SERVICE_CIDR,
            advertise_address=HOST_IP,
            bind_address=HOST_IP,
            apiserver_port=APISERVER_PORT,
            scheduler=True,
            keep_workdir=True,
            # The cluster's own: the control plane's daemons outlive `up` and are
            # recorded and stopped with the nodes'.
            supervisor=self.supervisor,
            extra_apiserver_args=[
                # Kubelets' serving certificates are signed by the cluster CA
                # (below), so the API server verifies them on logs/exec.
                f"--kubelet-certificate-authority={CONTROL_PLANE_DIR / 'pki' / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP",
                # A long-lived cluster: keep the audit log bounded.
                "--audit-log-maxsize=100",
                "--audit-log-maxbackup=1",
            ],
            extra_controller_manager_args=["--enable-hostpath-provisioner=true"],
        )

    def _wait_nodes_ready(self, timeout: float = 120, names: set[str] | None = None) -> None:
        names = names or {n.name for n in self.nodes}

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

        wait_for(ready, timeout, "nodes Ready with their fake GPUs", error=ClusterError,
                 details=lambda: log_tails(*(Node.named(n).log("kubelet") for n in sorted(names))))

    def _apply_addons(self) -> None:
        coredns = string.Template((HERE / "addons" / "coredns.yaml").read_text()).substitute(
            IMAGE=system_images.COREDNS_IMAGE, DNS_IP=DNS_IP, DOMAIN=DOMAIN, REPLICAS=min(2, len(self.nodes)))
        self.kubectl("apply", "-f", "-", input=coredns)
        self.kubectl("apply", "-f", str(HERE / "addons" / "storage.yaml"))
        self.kubectl("apply", "-f", str(HERE / "addons" / "node-volume-sources.yaml"))

    def _wait_coredns(self, timeout: float = 120) -> None:
        def ready() -> bool:
            out = self.kubectl("-n", "kube-system", "get", "deploy", "coredns", "-o", "json", check=False)
            if out.returncode != 0:
                return False
            return json.loads(out.stdout).get("status", {}).get("readyReplicas", 0) >= 1

        wait_for(ready, timeout, "CoreDNS ready", error=ClusterError,
                 details=lambda: log_tails(*(n.log("kubelet") for n in self.nodes)))

    def _say(self, msg: str) -> None:
        if self.verbose:
            print(f"cluster: {msg}", flush=True)
