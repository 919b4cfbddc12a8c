"""The Secrets: the Slurm auth key, the internal database password and slurmdbd.conf.

The builders only wrap what they are given: the handler generates the key and the
password once (never here, never offline) and creates those two Secrets once. They
are immutable, so nothing can overwrite them by accident and the kubelet need not
watch them. Secret bytes appear only in a Secret's data: pods reference them by
volume or secretKeyRef, never by value.
"""

import base64

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta

AUTH_KEY_FILE = "slurm.key"
AUTH_KEY_BYTES = 1024  # what the handler generates
MIN_AUTH_KEY_BYTES = 32  # auth/slurm needs at least this many random bytes
DATABASE_PASSWORD_KEY = "password"
SSH_HOST_KEY_FILE = "ssh_host_ed25519_key"
SLURMDBD_CONF_FILE = "slurmdbd.conf"


def _encode(value: bytes | str) -> str:
    return base64.b64encode(value.encode() if isinstance(value, str) else value).decode()


def _secret(cluster: SlurmCluster, name: str, component: str | None, data: dict[str, bytes | str], immutable: bool) -> dict:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(name, cluster, labels.object_labels(cluster.metadata.name, component)),
        "type": "Opaque",
        "data": {key: _encode(value) for key, value in sorted(data.items())},
    }
    if immutable:
        secret["immutable"] = True
    return secret


def auth_key_secret(cluster: SlurmCluster, key: bytes) -> dict:
    """The auth/slurm key every Slurm daemon of the cluster shares (component: the whole cluster)."""
    if not key:
        raise ValueError("the Slurm auth key is empty; generate it once with secrets.token_bytes")
    return _secret(cluster, naming.auth_key_secret(cluster.metadata.name), None, {AUTH_KEY_FILE: key}, immutable=True)


def database_password_secret(cluster: SlurmCluster, password: str) -> dict:
    """The password of the internal MariaDB's `slurm` user; MariaDB and slurmdbd.conf both use it."""
    if not password:
        raise ValueError("the database password is empty; generate it once with secrets.token_urlsafe")
    return _secret(
        cluster, naming.database_password_secret(cluster.metadata.name), labels.DATABASE,
        {DATABASE_PASSWORD_KEY: password}, immutable=True,
    )


def accounting_config_secret(cluster: SlurmCluster, slurmdbd_conf: str) -> dict:
    """slurmdbd.conf holds the database password, so it is a Secret; it changes with the spec."""
    return _secret(
        cluster, naming.accounting_config_secret(cluster.metadata.name), labels.ACCOUNTING,
        {SLURMDBD_CONF_FILE: slurmdbd_conf}, immutable=False,
    )


def ssh_host_key_secret(cluster: SlurmCluster, private_key: bytes) -> dict:
    """The login pods' sshd host key (OpenSSH format), generated once: every login pod, also a
    replaced or an added one, presents the same key, so researchers never see a host-key warning."""
    return _secret(cluster, naming.ssh_host_key_secret(cluster.metadata.name), labels.LOGIN, {SSH_HOST_KEY_FILE: private_key}, True)
