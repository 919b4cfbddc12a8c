"""A site's directory for the tests and the demo: slapd (the image localhost/kubeslurm/ldap)
as a StatefulSet on a Kubernetes cluster, seeded with users, groups and ssh keys, serving
StartTLS with a certificate of a CA made here.

    directory = Directory(kube, namespace)
    directory.deploy([DirectoryUser("alice", 20001, ssh_key=alice_pub), ...], groups=[...])
    directory.spec()          # what spec.identity.ldap says to reach it
    directory.add_user(...)   # while it runs (ldapadd in the pod, as its root over ldapi:///)

What it creates in `namespace`: the Secrets `directory-tls` (server certificate and key),
`directory-admin` (the admin's password), `sssd-bind` (SSSD's bind password), the ConfigMaps
`directory-seed` (LDIF) and `directory-ca` (the CA certificate SlurmClusters name), a headless
Service and a ClusterIP Service `directory`, and the StatefulSet `directory` (one pod, its data
in an emptyDir: the tests' directory lives as long as its namespace).
"""

from __future__ import annotations

import datetime
import secrets
from dataclasses import dataclass, field

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .kubectl import Kube

IMAGE = "localhost/kubeslurm/ldap:2.6"
NAME = "directory"
SUFFIX = "dc=example,dc=org"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
BIND_DN = f"cn=sssd,ou=services,{SUFFIX}"
BIND_SECRET = "sssd-bind"
CA_CONFIG_MAP = "directory-ca"


# ---------------------------------------------------------------- TLS

@dataclass(frozen=True)
class CertificateAuthority:
    certificate_pem: str
    key: ec.EllipticCurvePrivateKey

    def issue(self, dns_names: list[str]) -> tuple[str, str]:
        """(certificate PEM, key PEM) of a server certificate for dns_names, valid two days."""
        key = ec.generate_private_key(ec.SECP256R1())
        ca = x509.load_pem_x509_certificate(self.certificate_pem.encode())
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        return _pem(certificate), _key_pem(key)


def new_ca(name: str = "kubeslurm test directory CA") -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(_pem(certificate), key)


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


# ---------------------------------------------------------------- entries

@dataclass(frozen=True)
class DirectoryUser:
    name: str
    uid: int
    gid: int | None = None  # its own group's, by default uid
    ssh_key: str | None = None  # an authorized_keys line

    def ldif(self) -> str:
        gid = self.gid or self.uid
        lines = [f"dn: uid={self.name},{PEOPLE}", "objectClass: inetOrgPerson", "objectClass: posixAccount",
                 f"uid: {self.name}", f"cn: {self.name.title()} Researcher", f"sn: {self.name.title()}",
                 f"uidNumber: {self.uid}", f"gidNumber: {gid}", f"homeDirectory: /home/{self.name}",
                 "loginShell: /bin/bash"]
        if self.ssh_key:
            lines += ["objectClass: ldapPublicKey", f"sshPublicKey: {self.ssh_key}"]
        own_group = DirectoryGroup(self.name, gid)
        return "\n".join(lines) + "\n\n" + own_group.ldif()


@dataclass(frozen=True)
class DirectoryGroup:
    name: str
    gid: int
    members: tuple[str, ...] = field(default_factory=tuple)

    def ldif(self) -> str:
        lines = [f"dn: cn={self.name},{GROUPS}", "objectClass: posixGroup", f"cn: {self.name}", f"gidNumber: {self.gid}"]
        return "\n".join(lines + [f"memberUid: {m}" for m in self.members]) + "\n\n"


def _ssha(password: str) -> str:
    import base64
    import hashlib

    salt = secrets.token_bytes(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


def seed_ldif(users: list[DirectoryUser], groups: list[DirectoryGroup], bind_password: str) -> str:
    tree = "".join(f"dn: ou={ou},{SUFFIX}\nobjectClass: organizationalUnit\nou: {ou}\n\n" for ou in ("people", "groups", "services"))
    service = (f"dn: {BIND_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: sssd\n"
               f"userPassword: {_ssha(bind_password)}\n\n")
    return tree + service + "".join(u.ldif() for u in users) + "".join(g.ldif() for g in groups)


# ---------------------------------------------------------------- on Kubernetes

class Directory:
    """slapd on a Kubernetes cluster, in `namespace`."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.ca = new_ca()
        self.host = f"{NAME}.{namespace}.svc.cluster.local"

    def spec(self, login_groups: list[str] = ()) -> dict:
        """spec.identity of a SlurmCluster in the same namespace that reads this directory."""
        ldap = {
            "uris": [f"ldap://{self.host}"], "searchBase": SUFFIX, "userSearchBase": PEOPLE, "groupSearchBase": GROUPS,
            "bindDN": BIND_DN, "bindPasswordSecretRef": {"name": BIND_SECRET},
            "caCertificate": {"configMap": {"name": CA_CONFIG_MAP}},
            # short caches: the tests add a user and wait for it
            "cacheTimeoutSeconds": 30, "negativeCacheTimeoutSeconds": 10,
        }
        if login_groups:
            ldap["loginGroups"] = list(login_groups)
        return {"mode": "ldap", "ldap": ldap}

    def objects(self, users: list[DirectoryUser], groups: list[DirectoryGroup]) -> list[dict]:
        bind_password = secrets.token_urlsafe(18)
        certificate, key = self.ca.issue([self.host, f"{NAME}.{self.namespace}.svc", f"{NAME}.{self.namespace}", NAME])
        labels = {"app.kubernetes.io/name": NAME}
        meta = lambda name: {"name": name, "namespace": self.namespace, "labels": labels}  # noqa: E731
        pod = {
            "metadata": {"labels": labels},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [{
                    "name": "slapd", "image": IMAGE, "imagePullPolicy": "Never",
                    "env": [{"name": "LDAP_SUFFIX", "value": SUFFIX},
                            {"name": "LDAP_ADMIN_PASSWORD_FILE", "value": "/etc/ldap-admin/password"},
                            {"name": "LDAP_DEBUG_LEVEL", "value": "0"}],
                    "ports": [{"name": "ldap", "containerPort": 389}],
                    "readinessProbe": {"tcpSocket": {"port": 389}, "periodSeconds": 2},
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    "volumeMounts": [
                        {"name": "tls", "mountPath": "/etc/ldap-tls", "readOnly": True},
                        {"name": "admin", "mountPath": "/etc/ldap-admin", "readOnly": True},
                        {"name": "seed", "mountPath": "/etc/ldap-seed", "readOnly": True},
                        {"name": "data", "mountPath": "/var/lib/ldap"},
                    ],
                }],
                "volumes": [
                    {"name": "tls", "secret": {"secretName": "directory-tls"}},
                    {"name": "admin", "secret": {"secretName": "directory-admin"}},
                    {"name": "seed", "configMap": {"name": "directory-seed"}},
                    {"name": "data", "emptyDir": {}},
                ],
            },
        }
        return [
            {"apiVersion": "v1", "kind": "Secret", "metadata": meta("directory-tls"), "type": "kubernetes.io/tls",
             "stringData": {"tls.crt": certificate, "tls.key": key, "ca.crt": self.ca.certificate_pem}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": meta("directory-admin"),
             "stringData": {"password": secrets.token_urlsafe(18)}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": meta(BIND_SECRET), "stringData": {"password": bind_password}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("directory-seed"),
             "data": {"50-site.ldif": seed_ldif(users, groups, bind_password)}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(CA_CONFIG_MAP), "data": {"ca.crt": self.ca.certificate_pem}},
            {"apiVersion": "v1", "kind": "Service", "metadata": meta(NAME),
             "spec": {"selector": labels, "ports": [{"name": "ldap", "port": 389, "targetPort": 389}]}},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(NAME),
             "spec": {"serviceName": NAME, "replicas": 1, "selector": {"matchLabels": labels}, "template": pod}},
        ]

    def deploy(self, users: list[DirectoryUser], groups: list[DirectoryGroup] = (), timeout: float = 180) -> None:
        self.kube.apply("\n---\n".join(yaml.safe_dump(o) for o in self.objects(list(users), list(groups))))
        self.kube.run("rollout", "status", f"statefulset/{NAME}", "-n", self.namespace, f"--timeout={int(timeout)}s")

    def ldapadd(self, ldif: str) -> None:
        """Adds entries as the directory's root (SASL EXTERNAL over ldapi:/// in its pod)."""
        self.kube.run("exec", "-i", "-n", self.namespace, f"{NAME}-0", "-c", "slapd", "--",
                      "ldapadd", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///", input=ldif)

    def add_user(self, user: DirectoryUser, also_in: list[DirectoryGroup] = ()) -> None:
        self.ldapadd(user.ldif())
        for group in also_in:
            self.kube.run("exec", "-i", "-n", self.namespace, f"{NAME}-0", "-c", "slapd", "--",
                          "ldapmodify", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///",
                          input=f"dn: cn={group.name},{GROUPS}\nchangetype: modify\nadd: memberUid\nmemberUid: {user.name}\n")
