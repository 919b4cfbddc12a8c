"""A real Kubernetes control plane on 127.0.0.1 for tests: etcd, kube-apiserver and
kube-controller-manager, upstream binaries at the version pinned in
e2e/kubernetes/go.mod (built by e2e/kubernetes/build.sh).

There is no kubelet here (and no kube-scheduler unless scheduler=True): pods are
created and stay Pending. What works is everything the API server and the
controllers do on their own --
validation, admission, RBAC, server-side apply, CRDs, garbage collection,
Deployments -> ReplicaSets -> Pods, StatefulSets -> Pods, service account
tokens -- which is what an operator talks to.

    with ControlPlane(workdir, bin_dir) as cp:
        cp.kubectl("get", "ns")
        client = kubernetes.config.new_client_from_config(str(cp.kubeconfig_path))

TLS is real (one CA signs everything, generated with the openssl CLI), the
API server authorizes with Node,RBAC, and writes are audit-logged so a test can
count the API writes a component made (`audit_writes`).

The local cluster (e2e/cluster/local_cluster.py) builds on this class: it binds
the API server to a node-network address, adds kube-scheduler, asks for
certificates of kubelets and kube-proxies (`sign_client_cert`,
`sign_serving_cert`, `write_kubeconfig`) and starts the daemons detached so
they outlive `make cluster-up`.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "e2e" / "kubernetes" / "build.sh"

# One fixed place for everything a run leaves behind, so that a run killed
# half-way (Ctrl-C twice, a CI timeout) can be cleaned up by the next one.
STATE_DIR = Path(os.environ.get("KUBESLURM_K8S_STATE_DIR", "/tmp/kubeslurm-k8s-tier"))

DEFAULT_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")

# Metadata (who, what verb, which object, response code) for every write; nothing
# for reads, so the log stays small and a test can count writes by user.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"""

# Controllers that need a cloud provider; there is none here.
CLOUD_CONTROLLERS = (
    "cloud-node-lifecycle-controller",
    "service-lb-controller",
    "node-route-controller",
)


class ControlPlaneError(RuntimeError):
    pass


def pinned_kubernetes_version() -> str:
    """The k8s.io/kubernetes version pinned in e2e/kubernetes/go.mod, e.g. 'v1.30.14'."""
    for line in (REPO / "e2e" / "kubernetes" / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes" and parts[1].startswith("v"):
            return parts[1]
    raise ControlPlaneError("no k8s.io/kubernetes requirement in e2e/kubernetes/go.mod")


def build_kubernetes_binaries(*names: str, stream_output: bool = True) -> Path:
    """Builds (or finds, when already built) the pinned binaries; returns their directory.

    A cold build takes many minutes on 2 cores; a warm call returns at once.
    KUBESLURM_K8S_BIN_DIR, when set, is used as is and nothing is built.
    """
    override = os.environ.get("KUBESLURM_K8S_BIN_DIR")
    if override:
        return Path(override)
    names = names or DEFAULT_BINARIES
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *names],
        stdout=subprocess.PIPE,
        stderr=None if stream_output else subprocess.PIPE,
        text=True,
    )
    if result.returncode != 0:
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} {' '.join(names)} failed with exit code {result.returncode}"
            + (f":\n{result.stderr[-4000:]}" if result.stderr else " (its output is above)")
        )
    return Path(result.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log: Path


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager in `workdir` (removed by stop()).

    bin_dir holds etcd, kube-apiserver, kube-controller-manager and kubectl; by
    default they are built (or found) with e2e/kubernetes/build.sh.
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
        detach: bool = False,
        state_dir: Path | str | None = None,
    ):
        """bind_address/apiserver_port: where kube-apiserver listens (port 0: a free
        one). scheduler: also run kube-scheduler. detach: the daemons do not die
        with this process (the default ties them to it, for tests); whoever
        detaches stops them later by the PIDs in the state file. state_dir: where
        that state file goes (default STATE_DIR, which cleanup_leftovers() sweeps).
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
        self.detach = detach
        self.state_dir = Path(state_dir) if state_dir else STATE_DIR

        self.pki = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.audit_log_path = self.logs / "audit.log"
        self.kubeconfig_path = self.workdir / "admin.kubeconfig"
        self.etcd_port = 0
        self.apiserver_port = apiserver_port
        self.controller_manager_port = 0
        self.scheduler_port = 0
        self._procs: list[_Proc] = []
        self._state_file: Path | None = None

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
        return self._state_file

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
                raise ControlPlaneError(
                    f"{self.bin_dir / name} is missing: run {BUILD_SCRIPT}"
                )
        if self.workdir.exists() and any(self.workdir.iterdir()):
            raise ControlPlaneError(f"workdir {self.workdir} is not empty")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._state_file = self.state_dir / f"control-plane-{os.getpid()}-{id(self):x}.json"
        try:
            self.etcd_port = free_port()
            self.apiserver_port = self.apiserver_port or free_port()
            self.controller_manager_port = free_port()
            self.scheduler_port = free_port()
            self._write_pki()
            self._write_kubeconfigs()
            (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
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
        """Stops every process (controller-manager first, etcd last) and removes workdir."""
        for proc in reversed(self._procs):
            _terminate(proc.popen)
        self._procs.clear()
        if self._state_file is not None:
            self._state_file.unlink(missing_ok=True)
            self._state_file = None
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running process, for reports and leak hunting."""
        out = {}
        for proc in self._procs:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[proc.name] = int(line.split()[1]) * 1024
        return out

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- helpers for tests ---------------------------------------------------

    def env(self, kubeconfig: Path | str | None = None) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing at this cluster, for subprocesses."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.kubeconfig_path)
        return env

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | str | None = None,
        check: bool = True,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        """Runs the pinned kubectl against this cluster (as admin unless kubeconfig)."""
        cmd = [
            str(self.bin_dir / "kubectl"),
            f"--kubeconfig={kubeconfig or self.kubeconfig_path}",
            *args,
        ]
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr.strip()}\n{result.stdout.strip()}"
            )
        return result

    def write_service_account_kubeconfig(
        self, namespace: str, name: str, path: Path | str, duration: str = "24h"
    ) -> Path:
        """A kubeconfig that authenticates as ServiceAccount namespace/name.

        The token comes from the TokenRequest API (`kubectl create token`), like the
        projected token a pod would get.
        """
        token = self.kubectl(
            "create", "token", name, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        path = Path(path)
        path.write_text(
            _kubeconfig(
                self.server,
                self._ca_data(),
                f"system:serviceaccount:{namespace}:{name}",
                {"token": token},
                namespace=namespace,
            )
        )
        path.chmod(0o600)
        return path

    def audit_mark(self) -> int:
        """A position in the audit log; audit_writes(since=mark) sees only later events."""
        try:
            return self.audit_log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def audit_writes(
        self,
        since: dt.datetime | int | None = None,
        user: str | None = None,
        *,
        verbs: tuple[str, ...] = WRITE_VERBS,
    ) -> list[dict]:
        """Write requests the API server has finished (audit stage ResponseComplete).

        since: an audit_mark() (exact) or a datetime (compared with the time the
        request was received; naive means UTC). user: the authenticated user name,
        e.g. 'system:serviceaccount:ns:name'. The API server writes an event right
        after it answers, so poll briefly when counting a request just made.
        """
        offset = since if isinstance(since, int) else 0
        if isinstance(since, dt.datetime) and since.tzinfo is None:
            since = since.replace(tzinfo=dt.timezone.utc)
        events = []
        try:
            with self.audit_log_path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return []
        for raw in data.splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # a line still being written
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in verbs:
                continue
            if user is not None and event.get("user", {}).get("username") != user:
                continue
            if isinstance(since, dt.datetime):
                received = _parse_time(event.get("requestReceivedTimestamp"))
                if received is None or received < since:
                    continue
            events.append(event)
        return events

    def sign_client_cert(self, name: str, user: str, groups: tuple[str, ...] = ()) -> None:
        """pki/NAME.{crt,key}: a client certificate for `user` in `groups`, signed by the CA."""
        subject = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        self._sign(name, subject, "clientAuth")

    def sign_serving_cert(self, name: str, common_name: str, sans: list[str]) -> None:
        """pki/NAME.{crt,key}: a serving certificate (e.g. a kubelet's), sans like 'IP:10.0.0.1'."""
        self._sign(name, f"/CN={common_name}", "serverAuth", ",".join(sans))

    def write_kubeconfig(self, path: Path | str, cert: str, user: str, server: str | None = None) -> Path:
        """A kubeconfig authenticating with pki/CERT.{crt,key} (see sign_client_cert)."""
        path = Path(path)
        path.write_text(_kubeconfig(server or self.server, self._ca_data(), user, self._cert_user(cert)))
        path.chmod(0o600)
        return path

    # -- internals -------------------------------------------------------------

    def _write_pki(self) -> None:
        self.pki.mkdir(mode=0o700)
        self._make_ca("ca", "/CN=kubeslurm-test-ca")
        # The aggregation layer's own CA, as kubeadm does: the API server proxies
        # to aggregated API servers (metrics-server...) with a client certificate
        # they trust only for X-Remote-User headers. Without it the
        # controller-manager also logs "missing content for CA bundle" errors.
        self._make_ca("front-proxy-ca", "/CN=kubeslurm-test-front-proxy-ca")
        self._sign("front-proxy-client", "/CN=front-proxy-client", "clientAuth", ca="front-proxy-ca")
        service_ip = str(next(ipaddress.ip_network(self.service_cluster_ip_range).hosts()))
        sans = [
            "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local",
            "IP:127.0.0.1", f"IP:{service_ip}", f"IP:{self.advertise_address}",
        ]
        self._sign("apiserver", "/CN=kube-apiserver", "serverAuth", ",".join(dict.fromkeys(sans)))
        # O=system:masters is bound to cluster-admin by the bootstrap RBAC policy.
        self._sign("admin", "/O=system:masters/CN=kubeslurm-admin", "clientAuth")
        self._sign(
            "controller-manager", "/CN=system:kube-controller-manager", "clientAuth"
        )
        if self.scheduler:
            self._sign("scheduler", "/CN=system:kube-scheduler", "clientAuth")
        # For kubelets (the later, full-cluster tier): logs, exec, port-forward.
        self._sign(
            "apiserver-kubelet-client",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "clientAuth",
        )
        _openssl("genrsa", "-out", self.pki / "sa.key", "2048")
        _openssl("rsa", "-in", self.pki / "sa.key", "-pubout", "-out", self.pki / "sa.pub")

    def _make_ca(self, name: str, subject: str) -> None:
        _openssl(
            "req", "-x509", "-new", "-nodes", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", self.pki / f"{name}.key", "-out", self.pki / f"{name}.crt",
            "-days", "3650", "-subj", subject,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )

    def _sign(
        self, name: str, subject: str, usage: str, sans: str | None = None, ca: str = "ca"
    ) -> None:
        key, csr, crt = (self.pki / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.pki / f"{name}.ext"
        lines = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={usage}",
        ]
        if sans:
            lines.append(f"subjectAltName={sans}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "req", "-new", "-nodes", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", key, "-out", csr, "-subj", subject,
        )
        _openssl(
            "x509", "-req", "-in", csr, "-CA", self.pki / f"{ca}.crt",
            "-CAkey", self.pki / f"{ca}.key", "-CAcreateserial", "-out", crt,
            "-days", "3650", "-sha256", "-extfile", ext,
        )
        csr.unlink()
        ext.unlink()

    def _ca_data(self) -> str:
        return base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()

    def _cert_user(self, name: str) -> dict:
        return {
            "client-certificate-data": base64.b64encode(
                (self.pki / f"{name}.crt").read_bytes()
            ).decode(),
            "client-key-data": base64.b64encode((self.pki / f"{name}.key").read_bytes()).decode(),
        }

    def _write_kubeconfigs(self) -> None:
        for path, user, cert in (
            (self.kubeconfig_path, "kubeslurm-admin", "admin"),
            (self.workdir / "controller-manager.kubeconfig", "system:kube-controller-manager", "controller-manager"),
        ):
            path.write_text(_kubeconfig(self.server, self._ca_data(), user, self._cert_user(cert)))
            path.chmod(0o600)
        if self.scheduler:
            self.write_kubeconfig(self.workdir / "scheduler.kubeconfig", "scheduler", "system:kube-scheduler")

    def _spawn(self, name: str, args: list[str]) -> _Proc:
        log = self.logs / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [str(self.bin_dir / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=None if self.detach else _die_with_parent,
            )
        proc = _Proc(name, popen, log)
        self._procs.append(proc)
        self._record_state()
        return proc

    def _record_state(self) -> None:
        assert self._state_file is not None
        self._state_file.write_text(
            json.dumps(
                {
                    "owner_pid": os.getpid(),
                    "workdir": str(self.workdir),
                    "pids": [p.popen.pid for p in self._procs],
                }
            )
        )

    def _start_etcd(self) -> None:
        peer_port = free_port()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        proc = self._spawn(
            "etcd",
            [
                "--name=kubeslurm",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=kubeslurm={peer}",
                "--initial-cluster-state=new",
                # Test data: losing it on a power cut is fine, waiting for fsync
                # on every write is not.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait(proc, lambda: _http_ok("127.0.0.1", self.etcd_port, "/health", None), "etcd /health")

    def _apiserver_args(self) -> list[str]:
        pki = self.pki
        args = [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={self.bind_address}",
            f"--secure-port={self.apiserver_port}",
            f"--advertise-address={self.advertise_address}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={self.service_cluster_ip_range}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--profiling=false",
            "--v=1",
        ]
        if ipaddress.ip_address(self.advertise_address).is_loopback:
            # Endpoints may not hold loopback addresses, so the reconciler of the
            # default/kubernetes Service would only log errors. Nothing in-cluster
            # reaches the API server through that Service in this tier.
            args.append("--endpoint-reconciler-type=none")
        return args + self.extra_apiserver_args

    def _start_apiserver(self) -> None:
        proc = self._spawn("kube-apiserver", self._apiserver_args())
        self._wait(proc, lambda: self._api_ok("/readyz"), "kube-apiserver /readyz")

    def _start_controller_manager(self) -> None:
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        controllers = ",".join(["*", "bootstrap-signer-controller", "token-cleaner-controller"]
                               + [f"-{c}" for c in CLOUD_CONTROLLERS])
        proc = self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.controller_manager_port}",
                f"--cert-dir={self.workdir / 'controller-manager-certs'}",
                f"--controllers={controllers}",
                # Each controller acts as its own ServiceAccount, so RBAC and the
                # audit log tell them apart, as in a real cluster.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={self.pki / 'ca.crt'}",
                f"--cluster-signing-key-file={self.pki / 'ca.key'}",
                "--cluster-name=kubeslurm",
                # One instance: no lease to wait for after a restart.
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
                *self.extra_controller_manager_args,
            ],
        )
        self._wait(
            proc,
            lambda: _http_ok("127.0.0.1", self.controller_manager_port, "/healthz", _insecure_tls()),
            "kube-controller-manager /healthz",
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self.workdir / "scheduler.kubeconfig"
        proc = self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(
            proc,
            lambda: _http_ok("127.0.0.1", self.scheduler_port, "/healthz", _insecure_tls()),
            "kube-scheduler /healthz",
        )

    def _wait_until_usable(self) -> None:
        # The ServiceAccount controller creating default/default shows the
        # controller-manager is talking to the API server and its informers run.
        kcm = next(p for p in self._procs if p.name == "kube-controller-manager")
        self._wait(
            kcm,
            lambda: self._api_ok("/api/v1/namespaces/default/serviceaccounts/default"),
            "ServiceAccount default/default (created by kube-controller-manager)",
        )

    def _wait(self, proc: _Proc, ready, what: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.1
        while True:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with code {proc.popen.returncode} while waiting "
                    f"for {what}; last lines of {proc.log}:\n{self.log_tail(proc.name)}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {self.startup_timeout:.0f}s waiting for {what}; "
                    f"last lines of {proc.log}:\n{self.log_tail(proc.name)}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def _api_ok(self, path: str) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return _http_ok(self.api_host, self.apiserver_port, path, ctx)


# -- leftovers of interrupted runs ----------------------------------------------


def cleanup_leftovers(state_dir: Path = STATE_DIR) -> list[int]:
    """Kills control-plane processes whose owning test process is gone.

    Each running ControlPlane records its PIDs in state_dir; a run that was
    killed before stop() leaves that record behind. A PID is only killed while
    its command line still names the recorded workdir (PIDs get reused).
    Returns the PIDs killed.
    """
    killed = []
    for record in sorted(Path(state_dir).glob("control-plane-*.json")):
        try:
            state = json.loads(record.read_text())
        except (OSError, ValueError):
            record.unlink(missing_ok=True)
            continue
        if _alive(state.get("owner_pid", -1)):
            continue  # another test session, still running
        workdir = state.get("workdir", "")
        for pid in reversed(state.get("pids", [])):
            if workdir and workdir in _cmdline(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
        if workdir and Path(workdir).is_dir():
            shutil.rmtree(workdir, ignore_errors=True)
        record.unlink(missing_ok=True)
    return killed


ControlPlane.cleanup_leftovers = staticmethod(cleanup_leftovers)


# -- small helpers ---------------------------------------------------------------


def _openssl(*args) -> None:
    result = subprocess.run(
        ["openssl", *map(str, args)], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed:\n{result.stderr}")


def _kubeconfig(server: str, ca_data: str, user: str, credentials: dict, namespace: str | None = None) -> str:
    context = {"cluster": "kubeslurm", "user": user}
    if namespace:
        context["namespace"] = namespace
    # JSON is YAML; no yaml dependency needed here.
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "kubeslurm", "cluster": {"server": server, "certificate-authority-data": ca_data}}
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "kubeslurm", "context": context}],
            "current-context": "kubeslurm",
        },
        indent=2,
    ) + "\n"


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


def _terminate(popen: subprocess.Popen, grace: float = 10.0) -> None:
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def _die_with_parent() -> None:
    # Belt and braces for a test process killed with SIGKILL: the kernel sends
    # the daemons SIGKILL too. cleanup_leftovers() covers what this misses.
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
