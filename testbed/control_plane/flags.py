"""The command lines of a ControlPlane's daemons: what each flag is for, kept apart from
starting and awaiting them (control_plane.py)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed.control_plane.control_plane import ControlPlane

# Controllers that need a cloud provider; there is none here.
CLOUD_CONTROLLERS = (
    "cloud-node-lifecycle-controller",
    "service-lb-controller",
    "node-route-controller",
)


def etcd_args(cp: "ControlPlane", peer_port: int) -> list[str]:
    client = f"http://127.0.0.1:{cp.etcd_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        "--name=kubeslurm",
        f"--data-dir={cp.workdir / 'etcd'}",
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
    ]


def apiserver_args(cp: "ControlPlane") -> list[str]:
    pki = cp.pki
    args = [
        f"--etcd-servers=http://127.0.0.1:{cp.etcd_port}",
        f"--bind-address={cp.bind_address}",
        f"--secure-port={cp.apiserver_port}",
        f"--advertise-address={cp.advertise_address}",
        f"--cert-dir={cp.workdir / 'apiserver-certs'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--service-cluster-ip-range={cp.service_cluster_ip_range}",
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
        f"--audit-policy-file={cp.workdir / 'audit-policy.yaml'}",
        f"--audit-log-path={cp.audit_log_path}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--profiling=false",
        "--v=1",
    ]
    if ipaddress.ip_address(cp.advertise_address).is_loopback:
        # Endpoints may not hold loopback addresses, so the reconciler of the
        # default/kubernetes Service would only log errors. Nothing in-cluster
        # reaches the API server through that Service in this tier.
        args.append("--endpoint-reconciler-type=none")
    return args + cp.extra_apiserver_args


def controller_manager_args(cp: "ControlPlane") -> list[str]:
    kubeconfig = cp.workdir / "controller-manager.kubeconfig"
    controllers = ",".join(["*", "bootstrap-signer-controller", "token-cleaner-controller"]
                           + [f"-{c}" for c in CLOUD_CONTROLLERS])
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={cp.controller_manager_port}",
        f"--cert-dir={cp.workdir / 'controller-manager-certs'}",
        f"--controllers={controllers}",
        # Each controller acts as its own ServiceAccount, so RBAC and the
        # audit log tell them apart, as in a real cluster.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={cp.pki / 'sa.key'}",
        f"--root-ca-file={cp.pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={cp.pki / 'ca.crt'}",
        f"--cluster-signing-key-file={cp.pki / 'ca.key'}",
        "--cluster-name=kubeslurm",
        # One instance: no lease to wait for after a restart.
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
        *cp.extra_controller_manager_args,
    ]


def scheduler_args(cp: "ControlPlane") -> list[str]:
    kubeconfig = cp.workdir / "scheduler.kubeconfig"
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={cp.scheduler_port}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]
