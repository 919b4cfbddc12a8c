"""A real Kubernetes control plane for tests: etcd, kube-apiserver and
kube-controller-manager (and kube-scheduler on request), upstream binaries at the
version pinned in testbed/kubernetes/go.mod (binaries.py).

There is no kubelet here: pods are created and stay Pending. What works is everything
the API server and the controllers do on their own -- validation, admission, RBAC,
server-side apply, CRDs, garbage collection, Deployments -> ReplicaSets -> Pods,
StatefulSets -> Pods, service account tokens -- which is what an operator talks to.

    with ControlPlane(workdir, bin_dir) as cp:
        cp.kubectl("get", "ns")
        client = kubernetes.config.new_client_from_config(str(cp.kubeconfig_path))

TLS is real (pki.py), the API server authorizes with Node,RBAC, and writes are
audit-logged so a test can count the API writes a component made (audit.py). The
daemons' flags are in flags.py; they are started and stopped by the test bed's process
supervisor (testbed/processes.py).

The local cluster (testbed/local_cluster) builds on this class: it binds the API
server to a node-network address, adds kube-scheduler, asks for certificates of
kubelets and kube-proxies (`sign_client_cert`, `sign_serving_cert`,
`write_kubeconfig`) and passes its own process supervisor, so the daemons outlive
`make cluster-up` and are stopped with the rest of the cluster.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

from testbed.control_plane import flags
from testbed.control_plane.audit import AUDIT_POLICY, AUDIT_POLICY_WITH_READS, WRITE_VERBS, AuditLog
from testbed.control_plane.binaries import BUILD_SCRIPT, DEFAULT_BINARIES, build_kubernetes_binaries
from testbed.control_plane.pki import Pki
from testbed.kubectl import Kube
from testbed.processes import Supervisor, rss, sweep_leftovers, tail
from testbed.waiting import wait_for

# One fixed place for everything a run leaves behind, so that a run killed
# half-way (Ctrl-C twice, a CI timeout) can be cleaned up by the next one.
STATE_DIR = Path(os.environ.get("KUBESLURM_K8S_STATE_DIR", "/tmp/kubeslurm-k8s-tier"))

class ControlPlaneError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager in `workdir` (removed by stop()).

    bin_dir holds etcd, kube-apiserver, kube-controller-manager and kubectl; by
    default they are built (or found) with testbed/kubernetes/build.sh.
    """

    def __init__(
        self,
        workdir: Path | str,
        bin_dir: Path | str | None = None,
        *,
        service_cluster_ip_range: str = "10.96.0.0/16",
        advertise_address: str = "127.0.0.1",
        startup_timeout: float = 180.0,
        extra_apiserver_args: list[str] | None = None,
        extra_controller_manager_args: list[str] | None = None,
        keep_workdir: bool | None = None,
        bind_address: str = "127.0.0.1",
        apiserver_port: int = 0,
        scheduler: bool = False,
        supervisor: Supervisor | None = None,
        audit_reads: bool = False,
    ):
        """bind_address/apiserver_port: where kube-apiserver listens (port 0: a free
        one). scheduler: also run kube-scheduler. supervisor: who records and stops
        the daemons; by default one of this control plane's own in STATE_DIR (which
        cleanup_leftovers() sweeps) whose daemons die with this process. The local
        cluster passes its own, whose daemons outlive `make cluster-up`.
        """
        self.workdir = Path(workdir).resolve()
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self.service_cluster_ip_range = service_cluster_ip_range
        self.advertise_address = advertise_address
        self.startup_timeout = startup_timeout
        self.extra_apiserver_args = list(extra_apiserver_args or [])
        self.extra_controller_manager_args = list(extra_controller_manager_args or [])
        if keep_workdir is None:
            keep_workdir = os.environ.get("KUBESLURM_K8S_KEEP_WORKDIR") == "1"
        self.keep_workdir = keep_workdir
        self.bind_address = bind_address
        self.scheduler = scheduler
        self.audit_policy = AUDIT_POLICY_WITH_READS if audit_reads else AUDIT_POLICY
        self._own_supervisor = supervisor is None
        self.supervisor = supervisor

        self.pki = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.audit_log_path = self.logs / "audit.log"
        self.audit = AuditLog(self.audit_log_path)
        self.kubeconfig_path = self.workdir / "admin.kubeconfig"
        self.etcd_port = 0
        self.apiserver_port = apiserver_port
        self.controller_manager_port = 0
        self.scheduler_port = 0
        self._popens: dict[str, subprocess.Popen] = {}

    # -- lifecycle -----------------------------------------------------------

    @property
    def api_host(self) -> str:
        """The address clients on this host use to reach the API server."""
        return "127.0.0.1" if self.bind_address in ("0.0.0.0", "::") else self.bind_address

    @property
    def server(self) -> str:
        return f"https://{self.api_host}:{self.apiserver_port}"

    @property
    def state_file(self) -> Path | None:
        """The JSON record of the running daemons' PIDs (None when stopped)."""
        return self.supervisor.record if self.supervisor and self.supervisor.record.exists() else None

    def __enter__(self) -> "ControlPlane":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.bin_dir is None:
            self.bin_dir = build_kubernetes_binaries()
        for name in DEFAULT_BINARIES + (("kube-scheduler",) if self.scheduler else ()):
            if not os.access(self.bin_dir / name, os.X_OK):
                raise ControlPlaneError(f"{self.bin_dir / name} is missing: run {BUILD_SCRIPT}")
        if self.workdir.exists() and any(self.workdir.iterdir()):
            raise ControlPlaneError(f"workdir {self.workdir} is not empty")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir()
        if self._own_supervisor:
            STATE_DIR.mkdir(parents=True, exist_ok=True)
            self.supervisor = Supervisor(STATE_DIR / f"control-plane-{os.getpid()}-{id(self):x}.json",
                                         die_with_parent=True)
        try:
            self.etcd_port = free_port()
            self.apiserver_port = self.apiserver_port or free_port()
            self.controller_manager_port = free_port()
            self.scheduler_port = free_port()
            Pki(self.pki).write_control_plane(self.service_cluster_ip_range, self.advertise_address,
                                              self.scheduler)
            self._write_kubeconfigs()
            (self.workdir / "audit-policy.yaml").write_text(self.audit_policy)
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            if self.scheduler:
                self._start_scheduler()
            self._wait_until_usable()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops every process (latest first: controller-manager before etcd) and removes workdir."""
        if self.supervisor is not None:
            self.supervisor.stop(grace=10)
            if self._own_supervisor:
                self.supervisor.record.unlink(missing_ok=True)
        self._popens.clear()
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running process, for reports and leak hunting."""
        return {name: rss(popen.pid) for name, popen in self._popens.items() if popen.poll() is None}

    def log_tail(self, name: str, lines: int = 40) -> str:
        return tail(self.logs / f"{name}.log", lines)

    # -- helpers for tests ---------------------------------------------------

    def env(self, kubeconfig: Path | str | None = None) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing at this cluster, for subprocesses."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.kubeconfig_path)
        return env

    def kubectl(self, *args: str, kubeconfig: Path | str | None = None, check: bool = True,
                input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """Runs the pinned kubectl against this cluster (as admin unless kubeconfig)."""
        return Kube(str(self.kubeconfig_path), str(self.bin_dir / "kubectl")).run(
            *args, kubeconfig=kubeconfig, check=check, input=input, timeout=timeout)

    def apply_crds(self, directory: Path | str, timeout: float = 60) -> None:
        """The CRDs in directory applied server-side (taking over fields another applier set, as
        the README's upgrade note does) and waited for until Established. Polled: `kubectl wait`
        fails at once while a new CRD's status.conditions is still null."""
        applied = self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(directory), "-o", "name").stdout.split()

        def established(name: str) -> bool:
            crd = json.loads(self.kubectl("get", name, "-o", "json").stdout)
            return any(c["type"] == "Established" and c["status"] == "True"
                       for c in crd.get("status", {}).get("conditions") or [])

        for name in applied:
            wait_for(lambda: established(name), timeout, f"{name} Established", interval=0.5)

    def write_service_account_kubeconfig(self, namespace: str, name: str, path: Path | str,
                                         duration: str = "24h") -> Path:
        """A kubeconfig that authenticates as ServiceAccount namespace/name.

        The token comes from the TokenRequest API (`kubectl create token`), like the
        projected token a pod would get.
        """
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()
        return Pki(self.pki).write_kubeconfig(Path(path), self.server, f"system:serviceaccount:{namespace}:{name}",
                                              {"token": token}, namespace=namespace)

    def audit_mark(self) -> int:
        """A position in the audit log; audit_writes(since=mark) sees only later events."""
        return self.audit.mark()

    def audit_writes(self, since: dt.datetime | int | None = None, user: str | None = None, *,
                     verbs: tuple[str, ...] = WRITE_VERBS) -> list[dict]:
        """Write requests the API server has finished: see AuditLog.writes."""
        return self.audit.writes(since, user, verbs=verbs)

    def sign_client_cert(self, name: str, user: str, groups: tuple[str, ...] = ()) -> None:
        """pki/NAME.{crt,key}: a client certificate for `user` in `groups`, signed by the CA."""
        subject = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        Pki(self.pki).sign(name, subject, "clientAuth")

    def sign_serving_cert(self, name: str, common_name: str, sans: list[str]) -> None:
        """pki/NAME.{crt,key}: a serving certificate (e.g. a kubelet's), sans like 'IP:10.0.0.1'."""
        Pki(self.pki).sign(name, f"/CN={common_name}", "serverAuth", ",".join(sans))

    def write_kubeconfig(self, path: Path | str, cert: str, user: str, server: str | None = None) -> Path:
        """A kubeconfig authenticating with pki/CERT.{crt,key} (see sign_client_cert)."""
        pki = Pki(self.pki)
        return pki.write_kubeconfig(Path(path), server or self.server, user, pki.cert_user(cert))

    # -- internals -------------------------------------------------------------

    def _write_kubeconfigs(self) -> None:
        self.write_kubeconfig(self.kubeconfig_path, "admin", "kubeslurm-admin")
        self.write_kubeconfig(self.workdir / "controller-manager.kubeconfig", "controller-manager",
                              "system:kube-controller-manager")
        if self.scheduler:
            self.write_kubeconfig(self.workdir / "scheduler.kubeconfig", "scheduler", "system:kube-scheduler")

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        # The workdir in every command line is the marker: it tells these daemons
        # from any later process under a reused PID.
        popen = self.supervisor.spawn(name, [str(self.bin_dir / name), *args], marker=str(self.workdir),
                                      log=self.logs / f"{name}.log", cwd=self.workdir)
        self._popens[name] = popen
        return popen

    def _start_etcd(self) -> None:
        self._spawn("etcd", flags.etcd_args(self, peer_port=free_port()))
        self._wait("etcd", lambda: _http_ok("127.0.0.1", self.etcd_port, "/health", None), "etcd /health")

    def _start_apiserver(self) -> None:
        self._spawn("kube-apiserver", flags.apiserver_args(self))
        self._wait("kube-apiserver", lambda: self._api_ok("/readyz"), "kube-apiserver /readyz")

    def _start_controller_manager(self) -> None:
        self._spawn("kube-controller-manager", flags.controller_manager_args(self))
        self._wait("kube-controller-manager",
                   lambda: _http_ok("127.0.0.1", self.controller_manager_port, "/healthz", _insecure_tls()),
                   "kube-controller-manager /healthz")

    def _start_scheduler(self) -> None:
        self._spawn("kube-scheduler", flags.scheduler_args(self))
        self._wait("kube-scheduler",
                   lambda: _http_ok("127.0.0.1", self.scheduler_port, "/healthz", _insecure_tls()),
                   "kube-scheduler /healthz")

    def _wait_until_usable(self) -> None:
        # The ServiceAccount controller creating default/default shows the
        # controller-manager is talking to the API server and its informers run.
        self._wait(
            "kube-controller-manager",
            lambda: self._api_ok("/api/v1/namespaces/default/serviceaccounts/default"),
            "ServiceAccount default/default (created by kube-controller-manager)",
        )

    def _wait(self, name: str, ready, what: str) -> None:
        popen = self._popens[name]
        log = self.logs / f"{name}.log"
        wait_for(ready, self.startup_timeout, what, interval=0.1, max_interval=1.0,
                 failed=lambda: popen.poll() is not None and f"{name} exited with code {popen.returncode}",
                 details=lambda: f"last lines of {log}:\n{self.log_tail(name)}", error=ControlPlaneError)

    def _api_ok(self, path: str) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return _http_ok(self.api_host, self.apiserver_port, path, ctx)


def cleanup_leftovers(state_dir: Path = STATE_DIR) -> list[int]:
    """Kills control-plane daemons whose owning test process is gone, and removes their
    workdirs (the daemons' marker). Returns the PIDs killed."""
    records = {}
    for record in Path(state_dir).glob("control-plane-*.json"):
        try:
            records[record] = json.loads(record.read_text())
        except (OSError, ValueError):
            pass
    killed = sweep_leftovers(state_dir, "control-plane-*.json")
    for record, data in records.items():
        if not record.exists():  # swept: its owner is gone
            for workdir in {p.get("marker", "") for p in data.get("procs", [])}:
                if workdir and Path(workdir).is_dir():
                    shutil.rmtree(workdir, ignore_errors=True)
    return killed


ControlPlane.cleanup_leftovers = staticmethod(cleanup_leftovers)


# -- small helpers ---------------------------------------------------------------


def _insecure_tls() -> ssl.SSLContext:
    # The controller-manager serves /healthz with a self-signed certificate.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _http_ok(host: str, port: int, path: str, tls: ssl.SSLContext | None) -> bool:
    try:
        if tls is None:
            conn = http.client.HTTPConnection(host, port, timeout=5)
        else:
            conn = http.client.HTTPSConnection(host, port, timeout=5, context=tls)
        try:
            conn.request("GET", path)
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return False
