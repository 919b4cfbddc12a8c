"""ldap mode (spec.identity): sssd in every Slurm pod, its config in a Secret only, sshd asking
the directory for keys and PAM for access, no local users; local mode keeps none of it."""

import base64
import datetime
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubeslurm.reconcile.directory_settings import ca_certificate_problem
from kubeslurm.render.cluster_objects import desired_objects
from kubeslurm.render.config.sssd_conf import directory_files
from kubeslurm.render.k8s.config_hash import config_hash_key
from kubeslurm.render.sssd_pods import SSSD_CONFIG_HASH_ANNOTATION

from .manifests import contract_documents, load_with_uids, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
BIND_PASSWORD = "Bind-pw.only-in-a-Secret"
HASH_KEY = config_hash_key(bytes(range(256)) * 4)
DIRECTORY = {
    "uris": ["ldap://ldap.example.org"], "searchBase": "dc=example,dc=org", "bindDN": "cn=sssd,ou=services,dc=example,dc=org",
    "bindPasswordSecretRef": {"name": "sssd-bind"}, "caCertificate": {"configMap": {"name": "site-ca"}},
    "loginGroups": ["researchers"],
}
LDAP = set_path(CLUSTER, "spec.identity", {"mode": "ldap", "ldap": DIRECTORY})
# Pod templates that run sssd, and the containers in them that look users up.
CLIENTS = {"research-controller": {"slurmctld"}, "research-accounting": {"slurmdbd"}, "research-login": {"login"},
           "h100": {"slurmd"}, "cpu": {"slurmd"}}


def ca_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test directory CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


CA = ca_pem()


def render(document=LDAP, password=BIND_PASSWORD, ca=CA) -> list[dict]:
    cluster, node_sets = load_with_uids(document, GPU_NODES, CPU_NODES)
    files = directory_files(cluster, password, ca) if cluster.spec.identity.mode == "ldap" else None
    return desired_objects(cluster, node_sets, database_password="db-pw", config_hash_key=HASH_KEY, directory_files=files)


def templates(objects) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"]["template"] for o in objects if o["kind"] == "StatefulSet"}


def test_sssd_conf_and_the_ca_are_in_a_secret_and_the_password_nowhere_else():
    objects = render()
    secret = next(o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "research-sssd")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(data) == {"sssd.conf", "ca.crt"} and data["ca.crt"] == CA
    assert f"ldap_default_authtok = {BIND_PASSWORD}" in data["sssd.conf"]
    assert "simple_allow_groups = researchers" in data["sssd.conf"]
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "SlurmCluster"
    others = [o for o in objects if o is not secret]
    assert BIND_PASSWORD not in json.dumps(others)
    assert not any(BIND_PASSWORD in json.dumps(o.get("data", {})) for o in objects if o["kind"] == "ConfigMap")


def test_every_slurm_pod_runs_sssd_and_its_user_facing_containers_reach_it_read_only():
    for name, template in templates(render()).items():
        spec = template["spec"]
        if name == "research-mariadb":
            assert "sssd" not in json.dumps(spec), "the database pod looks up no researcher"
            continue
        sidecar = next(c for c in spec["initContainers"] if c["name"] == "sssd")
        assert sidecar["restartPolicy"] == "Always", "a native sidecar: it starts, and answers, before the daemons"
        assert sidecar["startupProbe"]["exec"]["command"] == ["test", "-S", "/var/lib/sss/pipes/nss"]
        script = sidecar["command"][2]
        assert "chmod 0755 /var/lib/sss/pipes /var/lib/sss/mc" in script
        assert "install -o root -g root -m 0600 /etc/sssd-secret/sssd.conf /etc/sssd/sssd.conf" in script
        assert script.endswith("exec sssd -i --logger=stderr")
        assert sidecar["resources"]["requests"] == sidecar["resources"]["limits"], "slurmd pods stay Guaranteed"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["sssd-config"]["secret"] == {"secretName": "research-sssd", "defaultMode": 0o400}
        for container in spec["containers"]:
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            if container["name"] in CLIENTS[name]:
                assert mounts["/var/lib/sss/pipes"]["readOnly"] and mounts["/var/lib/sss/mc"]["readOnly"], (name, container["name"])
            else:
                assert "/var/lib/sss/pipes" not in mounts, (name, container["name"])
            assert "/etc/sssd-secret" not in mounts, "only the sidecar reads sssd.conf"


def test_no_local_users_are_made_from_the_accounts_in_ldap_mode():
    for name, template in templates(render()).items():
        text = json.dumps(template)
        assert "kubeslurm account user" not in text and "/etc/kubeslurm-users" not in text, name
        assert not any(m["mountPath"] == "/etc/passwd" for c in template["spec"]["containers"] for m in c.get("volumeMounts", []))


def test_sshd_takes_keys_from_the_directory_and_uses_pam():
    login = templates(render())["research-login"]["spec"]["containers"][0]
    options = dict(arg.split("=", 1) for arg in login["command"][4::2])
    assert options["AuthorizedKeysCommand"] == "/usr/bin/sss_ssh_authorizedkeys %u"
    assert options["AuthorizedKeysCommandUser"] == "nobody"
    assert options["AuthorizedKeysFile"] == "none"
    assert options["UsePAM"] == "yes"
    assert (options["PermitRootLogin"], options["PasswordAuthentication"], options["KbdInteractiveAuthentication"]) == ("no",) * 3
    with_secret = set_path(LDAP, "spec.login.ssh.authorizedKeysSecret", "research-keys")
    login = templates(render(with_secret))["research-login"]["spec"]["containers"][0]
    options = dict(arg.split("=", 1) for arg in login["command"][4::2])
    assert options["AuthorizedKeysFile"] == "/etc/ssh/kubeslurm-authorized-keys/%u"


def test_a_new_password_or_ca_rolls_the_pods_through_a_keyed_hash():
    before = templates(render())
    after_password = templates(render(password="another-Bind-pw"))
    after_ca = templates(render(ca=ca_pem()))
    for name in CLIENTS:
        hashes = [t[name]["metadata"]["annotations"][SSSD_CONFIG_HASH_ANNOTATION] for t in (before, after_password, after_ca)]
        assert len(set(hashes)) == 3, name
    assert templates(render())["research-login"]["metadata"]["annotations"] == before["research-login"]["metadata"]["annotations"]


def test_local_mode_has_no_sssd_anywhere():
    objects = render(CLUSTER)
    assert "sssd" not in json.dumps([o for o in objects if o["kind"] in ("StatefulSet", "Secret")])
    login = templates(objects)["research-login"]["spec"]["containers"][0]
    options = dict(arg.split("=", 1) for arg in login["command"][4::2])
    assert options["UsePAM"] == "no" and "AuthorizedKeysCommand" not in options


def test_ldap_mode_without_the_directory_files_is_a_programming_error():
    cluster, node_sets = load_with_uids(LDAP, GPU_NODES, CPU_NODES)
    with pytest.raises(ValueError, match="pass directory_files"):
        desired_objects(cluster, node_sets, database_password="db-pw", config_hash_key=HASH_KEY)


@pytest.mark.parametrize("pem,ok", [
    (CA.encode(), True),
    ((CA + CA).encode(), True),
    (b"not a certificate", False),
    (b"", False),
    (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", False),
])
def test_a_ca_bundle_must_hold_pem_certificates(pem, ok):
    assert (ca_certificate_problem(pem) is None) == ok
