"""The ReadDirectorySettings step: what sssd.conf needs from the objects spec.identity.ldap names.

In ldap mode the bind password (bindPasswordSecretRef) and the CA certificate
(caCertificate: a Secret or a ConfigMap) are read here, checked, and rendered with the
spec into sssd.conf and ca.crt (render/config/sssd_conf.directory_files), which the Render step
puts into the Secret <cluster>-sssd. Nothing reaches a pod from the named objects
directly, so a pod never waits on a missing object, a bad certificate or password is
refused before any pod sees it, and a changed one rolls the pods through the keyed hash
(render/sssd_pods.py). The named objects are read at every reconcile (by name: the
operator never lists Secrets), so a new password or CA takes effect within a resync.

The bind password is the admin's Secret, used whoever made it, unless it is one of the
operator's own Secrets of some cluster (secret_trust.is_operator_secret): naming another
cluster's key would write it into this cluster's sssd.conf and send it to a directory.
Messages name the field and the object and never quote what a Secret holds.
"""

from cryptography import x509

from .. import ownership
from ..render.config.sssd_conf import directory_files
from .kube_api import KubeApi
from .run_state import Run, StepFailed
from .secret_trust import is_operator_secret, secret_value

STEP = "ReadDirectorySettings"
MISSING = "DirectorySettingMissing"
INVALID = "DirectorySettingInvalid"
UNTRUSTED = "UntrustedSecret"
FIELD = "spec.identity.ldap"


def ca_certificate_problem(pem: bytes) -> str | None:
    """Why `pem` is no usable CA bundle (at least one PEM certificate), or None."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    if not certificates:
        return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    return None


def _bind_password(api: KubeApi, namespace: str, ref) -> str:
    field = f"{FIELD}.bindPasswordSecretRef"
    secret = api.get(ownership.SECRET, namespace, ref.name)
    if secret is None or ref.key not in (secret.get("data") or {}):
        raise StepFailed(STEP, MISSING, f"{field}: Secret {namespace}/{ref.name} with key {ref.key!r} not found; "
                                        "create it with the bind DN's password")
    if is_operator_secret(secret):
        raise StepFailed(STEP, UNTRUSTED, f"{field}: Secret {namespace}/{ref.name} is one of the Secrets kubeslurm makes "
                                          "for a cluster: the operator does not send it to a directory. Name a Secret of "
                                          "your own that holds the bind password")
    raw = secret_value(secret, ref.key)
    try:
        password = raw.decode("ascii").rstrip("\n") if raw is not None else ""
    except UnicodeDecodeError:
        password = ""
    if not password:
        raise StepFailed(STEP, INVALID, f"{field}: Secret {namespace}/{ref.name}, key {ref.key!r}: empty or not ASCII text; "
                                        "store the bind DN's password there")
    return password


def _ca_certificate(api: KubeApi, namespace: str, source) -> str:
    ref = source.ref
    field = f"{FIELD}.caCertificate.{'secret' if source.secret is not None else 'configMap'}"
    label = f"{source.kind} {namespace}/{ref.name}"
    if source.secret is not None:
        obj = api.get(ownership.SECRET, namespace, ref.name)
        pem = secret_value(obj, ref.key) if obj is not None else None
    else:
        obj = api.get(ownership.CONFIG_MAP, namespace, ref.name)
        text = ((obj or {}).get("data") or {}).get(ref.key)
        pem = text.encode() if text is not None else None
    if pem is None:
        raise StepFailed(STEP, MISSING, f"{field}: {label} with key {ref.key!r} not found; create it with the PEM CA "
                                        "certificate that signed the directory servers' certificates")
    problem = ca_certificate_problem(pem)
    if problem:
        raise StepFailed(STEP, INVALID, f"{field}: {label}, key {ref.key!r}, {problem}: put the directory's CA "
                                        "certificate there, PEM encoded")
    return pem.decode("ascii", errors="replace")


def read_directory_settings(api: KubeApi, run: Run) -> None:
    """run.directory_files: sssd.conf and ca.crt in ldap mode, None in local mode."""
    cluster = run.cluster
    ldap = cluster.spec.identity.ldap
    if cluster.spec.identity.mode != "ldap" or ldap is None:
        run.directory_files = None
        return
    namespace = cluster.metadata.namespace
    password = None
    if ldap.bind_password_secret_ref is not None:
        password = _bind_password(api, namespace, ldap.bind_password_secret_ref)
    ca = _ca_certificate(api, namespace, ldap.ca_certificate)
    try:
        run.directory_files = directory_files(cluster, password, ca)
    except ValueError as error:
        # render_sssd_conf names the setting (bind_password: ...) and never the password itself
        raise StepFailed(STEP, INVALID, f"{FIELD}: {error}") from None
