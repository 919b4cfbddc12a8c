"""The control plane's certificates: one CA signs everything (plus the aggregation layer's
own front-proxy CA, as kubeadm does), made with the openssl CLI, and kubeconfigs that
authenticate with them."""

from __future__ import annotations

import base64
import ipaddress
import json
import subprocess
from pathlib import Path


class PkiError(RuntimeError):
    pass


class Pki:
    """Certificates and keys as DIR/NAME.{crt,key}."""

    def __init__(self, dir: Path):
        self.dir = dir

    def write_control_plane(self, service_cluster_ip_range: str, advertise_address: str,
                            scheduler: bool) -> None:
        """The CAs and every certificate etcd's clients, the API server, the controller
        manager (and the scheduler) use; the service account key pair."""
        self.dir.mkdir(mode=0o700)
        self._make_ca("ca", "/CN=kubeslurm-test-ca")
        # The aggregation layer's own CA, as kubeadm does: the API server proxies
        # to aggregated API servers (metrics-server...) with a client certificate
        # they trust only for X-Remote-User headers. Without it the
        # controller-manager also logs "missing content for CA bundle" errors.
        self._make_ca("front-proxy-ca", "/CN=kubeslurm-test-front-proxy-ca")
        self.sign("front-proxy-client", "/CN=front-proxy-client", "clientAuth", ca="front-proxy-ca")
        service_ip = str(next(ipaddress.ip_network(service_cluster_ip_range).hosts()))
        sans = [
            "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local",
            "IP:127.0.0.1", f"IP:{service_ip}", f"IP:{advertise_address}",
        ]
        self.sign("apiserver", "/CN=kube-apiserver", "serverAuth", ",".join(dict.fromkeys(sans)))
        # O=system:masters is bound to cluster-admin by the bootstrap RBAC policy.
        self.sign("admin", "/O=system:masters/CN=kubeslurm-admin", "clientAuth")
        self.sign("controller-manager", "/CN=system:kube-controller-manager", "clientAuth")
        if scheduler:
            self.sign("scheduler", "/CN=system:kube-scheduler", "clientAuth")
        # For kubelets (the local cluster): logs, exec, port-forward.
        self.sign("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", "clientAuth")
        _openssl("genrsa", "-out", self.dir / "sa.key", "2048")
        _openssl("rsa", "-in", self.dir / "sa.key", "-pubout", "-out", self.dir / "sa.pub")

    def _make_ca(self, name: str, subject: str) -> None:
        _openssl(
            "req", "-x509", "-new", "-nodes", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", self.dir / f"{name}.key", "-out", self.dir / f"{name}.crt",
            "-days", "3650", "-subj", subject,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )

    def sign(self, name: str, subject: str, usage: str, sans: str | None = None, ca: str = "ca") -> None:
        """DIR/NAME.{crt,key}: a certificate for subject, usage clientAuth or serverAuth."""
        key, csr, crt = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.dir / f"{name}.ext"
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
            "x509", "-req", "-in", csr, "-CA", self.dir / f"{ca}.crt",
            "-CAkey", self.dir / f"{ca}.key", "-CAcreateserial", "-out", crt,
            "-days", "3650", "-sha256", "-extfile", ext,
        )
        csr.unlink()
        ext.unlink()

    def ca_data(self) -> str:
        return base64.b64encode((self.dir / "ca.crt").read_bytes()).decode()

    def cert_user(self, name: str) -> dict:
        """kubeconfig credentials of DIR/NAME.{crt,key}."""
        return {
            "client-certificate-data": base64.b64encode((self.dir / f"{name}.crt").read_bytes()).decode(),
            "client-key-data": base64.b64encode((self.dir / f"{name}.key").read_bytes()).decode(),
        }

    def write_kubeconfig(self, path: Path, server: str, user: str, credentials: dict,
                         namespace: str | None = None) -> Path:
        """A kubeconfig (mode 0600) for server, trusting the CA, as user with credentials."""
        path = Path(path)
        path.write_text(kubeconfig_text(server, self.ca_data(), user, credentials, namespace))
        path.chmod(0o600)
        return path


def kubeconfig_text(server: str, ca_data: str, user: str, credentials: dict, namespace: str | None = None) -> str:
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


def _openssl(*args) -> None:
    result = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed:\n{result.stderr}")
