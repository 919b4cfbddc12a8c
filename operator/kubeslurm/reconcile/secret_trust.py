"""Which Secrets a SlurmCluster may use, and whether what they hold has the right shape.

The operator's own Secrets have fixed names (<cluster>-auth-key, <cluster>-mariadb-password),
so anyone who may create Secrets in the namespace could create one before the operator
does: a key they know lets them forge any Slurm identity, root included, and a password
they chose opens the accounting database to them. Such a Secret is used only when the
SlurmCluster controls it (an ownerReference with the cluster's uid and controller: true,
which is what the operator writes when it creates one); otherwise the cluster is
Degraded, naming the Secret, and the Secret is neither used nor overwritten.

A Secret the spec names (accounting.database.external.passwordSecretRef) is the admin's
choice and is used whoever made it, unless it is one of the operator's own Secrets of some
cluster: naming another cluster's key or password would copy it into this cluster's
slurmdbd.conf and send it to a database server.

Every check raises StepFailed of the EnsureSecrets step; messages name the Secret and
what to do, and never quote what a Secret holds.
"""

import base64
import binascii

from .. import ownership
from ..api import GROUP
from ..api.pod_template import CLUSTER_SECRET_SUFFIXES
from kubeslurm.render.config.slurmdbd_conf import storage_password_problem
from kubeslurm.render.k8s.secrets import AUTH_KEY_BYTES, AUTH_KEY_FILE, DATABASE_PASSWORD_KEY, MIN_AUTH_KEY_BYTES, SSH_HOST_KEY_FILE
from .run_state import StepFailed
from .ssh_host_key import host_key_problem

STEP = "EnsureSecrets"
UNTRUSTED = "UntrustedSecret"
INVALID = "InvalidSecret"
MISSING_PASSWORD = "DatabasePasswordMissing"
PASSWORD_REF_FIELD = "spec.accounting.database.external.passwordSecretRef"


def _label(secret: dict) -> str:
    meta = secret["metadata"]
    return f"Secret {meta['namespace']}/{meta['name']}"


def controlled_by(obj: dict, owner_uid: str) -> bool:
    return any(
        ref.get("uid") == owner_uid and ref.get("controller") is True
        for ref in obj["metadata"].get("ownerReferences") or []
    )


def require_cluster_owned(secret: dict, cluster_raw: dict) -> None:
    """A Secret under one of the operator's names is used only when this cluster controls it."""
    if controlled_by(secret, cluster_raw["metadata"]["uid"]):
        return
    name = cluster_raw["metadata"]["name"]
    raise StepFailed(
        STEP, UNTRUSTED,
        f"{_label(secret)} was not created for SlurmCluster {name} (it has no ownerReference to it with "
        "controller: true), so the operator neither uses nor overwrites it: anyone who may create Secrets here "
        "could have planted it. Delete it and the operator generates its own, or rename the SlurmCluster",
    )


def _data(secret: dict, key: str) -> bytes | None:
    value = (secret.get("data") or {}).get(key)
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def auth_key(secret: dict, cluster_raw: dict) -> bytes:
    """The bytes of the cluster's auth key Secret, once it is the cluster's and long enough."""
    require_cluster_owned(secret, cluster_raw)
    key = _data(secret, AUTH_KEY_FILE)
    if key is None or len(key) < MIN_AUTH_KEY_BYTES:
        held = "no" if key is None else f"only {len(key)} bytes of"
        raise StepFailed(
            STEP, INVALID,
            f"{_label(secret)} holds {held} {AUTH_KEY_FILE!r}: auth/slurm needs at least {MIN_AUTH_KEY_BYTES} random "
            f"bytes (the operator generates {AUTH_KEY_BYTES}). Delete the Secret so the operator generates a new key, "
            "then restart the cluster's pods so they all read it",
        )
    return key


def _password(secret: dict, key: str, field: str, fix: str) -> str:
    raw = _data(secret, key)
    try:
        password = raw.decode("ascii") if raw is not None else None
    except UnicodeDecodeError:
        password = None
    problem = "the database password is not ASCII text" if password is None else storage_password_problem(password)
    if problem:
        raise StepFailed(STEP, INVALID, f"{field}{_label(secret)}, key {key!r}: {problem}; {fix}")
    return password


def generated_database_password(secret: dict, cluster_raw: dict) -> str:
    """The internal database's password from <cluster>-mariadb-password, once it is the cluster's."""
    require_cluster_owned(secret, cluster_raw)
    if DATABASE_PASSWORD_KEY not in (secret.get("data") or {}):
        raise StepFailed(
            STEP, INVALID,
            f"{_label(secret)} has no key {DATABASE_PASSWORD_KEY!r}: delete it so the operator generates the password "
            "again (a database that already exists keeps the password it was created with)",
        )
    return _password(secret, DATABASE_PASSWORD_KEY, "", "delete the Secret so the operator generates the password again")


def ssh_host_key(secret: dict, cluster_raw: dict) -> None:
    """The login pods' host key Secret is used once it is the cluster's and holds a usable key."""
    require_cluster_owned(secret, cluster_raw)
    problem = host_key_problem(_data(secret, SSH_HOST_KEY_FILE))
    if problem:
        raise StepFailed(
            STEP, INVALID,
            f"{_label(secret)} {problem} under {SSH_HOST_KEY_FILE!r}: delete it and the operator generates a new one "
            "(researchers will see the login node's host key change once)",
        )


def is_operator_secret(secret: dict) -> bool:
    """One of the Secrets kubeslurm makes for a cluster: by name, label or controlling SlurmCluster."""
    meta = secret["metadata"]
    if meta["name"].endswith(CLUSTER_SECRET_SUFFIXES):
        return True
    if (meta.get("labels") or {}).get(ownership.MANAGED_BY) == ownership.MANAGER:
        return True
    return any(
        ref.get("kind") == ownership.SLURM_CLUSTER.kind and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")
        for ref in meta.get("ownerReferences") or []
    )


def named_database_password(secret: dict | None, namespace: str, name: str, key: str) -> str:
    """The external database's password from the Secret the spec names (passwordSecretRef)."""
    if secret is None or key not in (secret.get("data") or {}):
        raise StepFailed(
            STEP, MISSING_PASSWORD,
            f"{PASSWORD_REF_FIELD}: Secret {namespace}/{name} with key {key!r} not found; create it with the database password",
        )
    if is_operator_secret(secret):
        raise StepFailed(
            STEP, UNTRUSTED,
            f"{PASSWORD_REF_FIELD}: {_label(secret)} is one of the Secrets kubeslurm makes for a cluster (its key or "
            f"passwords: *{', *'.join(CLUSTER_SECRET_SUFFIXES)}, or labelled or owned as such): the operator does not "
            "hand it to slurmdbd. Name a Secret of your own that holds the database password",
        )
    return _password(
        secret, key, f"{PASSWORD_REF_FIELD}: ", "set a password of that kind on the database user and in the Secret",
    )
