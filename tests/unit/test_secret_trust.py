"""Issue 11 items 5 and 6: which Secrets a cluster trusts, their shape, and what never leaks a password.

A planted Secret under the operator's names is refused (and nothing is created), a spec-named
one may not be another cluster's key or password, key and password have a shape checked
before use, slurmdbd.conf takes only passwords it can hold, and the hash of slurmdbd.conf
in the pod template is keyed with a key derived from the auth key.
"""

import base64
import hashlib
import hmac
import json

import pytest

from kubeslurm.api import SlurmCluster
from kubeslurm.reconcile import secret_trust
from kubeslurm.reconcile.cluster_reconcile import ClusterReconciler
from kubeslurm.reconcile.run_state import Run, StepFailed
from kubeslurm.reconcile.ssh_host_key import host_key_problem, new_host_key, public_host_key
from kubeslurm.render.cluster_objects import cluster_objects
from kubeslurm.render.config.slurmdbd_conf import render_slurmdbd_conf, storage_password_problem
from kubeslurm.render.k8s.config_hash import CONFIG_HASH_ANNOTATION, config_hash_key, keyed_config_hash
from kubeslurm.render.k8s.secrets import auth_key_secret, database_password_secret, ssh_host_key_secret

from .manifests import contract_documents, load_with_uids, set_path, with_uid

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
KEY = bytes(range(256)) * 4
PASSWORD = "s3cret-Password-value"
HOST_KEY = new_host_key()
UID = with_uid(CLUSTER)["metadata"]["uid"]
EXTERNAL = {"external": {"host": "db.example.org", "passwordSecretRef": {"name": "site-db", "key": "pw"}}}


def secret(name: str, data: dict[str, bytes], owner_uid: str | None = None, controller: bool = True, **meta) -> dict:
    metadata = {"name": name, "namespace": "hpc", **meta}
    if owner_uid:
        metadata["ownerReferences"] = [{"apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster", "name": "research",
                                        "uid": owner_uid, "controller": controller}]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def cluster_raw(document=CLUSTER) -> dict:
    return with_uid(document)


def refused(reason: str, *named: str):
    """pytest.raises for a StepFailed of EnsureSecrets whose message names every string of `named`."""

    class Check:
        def __enter__(self):
            self.raises = pytest.raises(StepFailed)
            self.info = self.raises.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.raises.__exit__(*exc)
            failure = self.info.value
            assert (failure.step, failure.reason) == ("EnsureSecrets", reason), failure
            for text in named:
                assert text in failure.message, (text, failure.message)
            return handled

    return Check()


# ---------------------------------------------------------------- the operator's own Secrets


def test_an_auth_key_the_cluster_controls_is_used():
    assert secret_trust.auth_key(secret("research-auth-key", {"slurm.key": KEY}, UID), cluster_raw()) == KEY


@pytest.mark.parametrize("owner_uid,controller", [(None, True), ("uid-of-someone-else", True), (UID, False)],
                         ids=["no owner", "another owner", "owner but not controller"])
def test_a_planted_auth_key_is_refused_naming_it(owner_uid, controller):
    planted = secret("research-auth-key", {"slurm.key": KEY}, owner_uid, controller)
    with refused("UntrustedSecret", "Secret hpc/research-auth-key", "SlurmCluster research", "Delete it"):
        secret_trust.auth_key(planted, cluster_raw())


@pytest.mark.parametrize("data,held", [({"slurm.key": b"k" * 31}, "only 31 bytes"), ({}, "holds no 'slurm.key'"),
                                       ({"other": KEY}, "holds no 'slurm.key'")])
def test_an_owned_auth_key_of_the_wrong_shape_is_refused(data, held):
    with refused("InvalidSecret", "Secret hpc/research-auth-key", held, "at least 32"):
        secret_trust.auth_key(secret("research-auth-key", data, UID), cluster_raw())


def test_an_auth_key_of_32_bytes_is_enough():
    assert secret_trust.auth_key(secret("research-auth-key", {"slurm.key": b"k" * 32}, UID), cluster_raw()) == b"k" * 32


def test_a_planted_database_password_is_refused_and_never_quoted():
    planted = secret("research-mariadb-password", {"password": b"attacker-knows-this"})
    with refused("UntrustedSecret", "Secret hpc/research-mariadb-password") as failure:
        secret_trust.generated_database_password(planted, cluster_raw())
    assert "attacker-knows-this" not in failure.value.message


def test_an_owned_database_password_is_used_when_slurmdbd_conf_can_hold_it():
    owned = secret("research-mariadb-password", {"password": PASSWORD.encode()}, UID)
    assert secret_trust.generated_database_password(owned, cluster_raw()) == PASSWORD
    with refused("InvalidSecret", "Secret hpc/research-mariadb-password", "'password'"):
        secret_trust.generated_database_password(secret("research-mariadb-password", {"pw": b"x"}, UID), cluster_raw())
    with refused("InvalidSecret", "one line of printable ASCII") as failure:
        secret_trust.generated_database_password(
            secret("research-mariadb-password", {"password": b"two words"}, UID), cluster_raw())
    assert "two words" not in failure.value.message


# ---------------------------------------------------------------- the Secret the spec names


def test_a_spec_named_password_is_used_whoever_made_it():
    site = secret("site-db", {"pw": b"site-db-password"})
    assert secret_trust.named_database_password(site, "hpc", "site-db", "pw") == "site-db-password"


@pytest.mark.parametrize("name,meta,owner_uid", [
    ("other-auth-key", {}, None),
    ("other-mariadb-password", {}, None),
    ("research-slurmdbd-config", {}, None),
    ("renamed", {"labels": {"app.kubernetes.io/managed-by": "kubeslurm"}}, None),
    ("renamed", {}, "uid-of-SlurmCluster-other"),
], ids=["another cluster's key", "another cluster's password", "a slurmdbd.conf", "labelled ours", "owned by a cluster"])
def test_a_spec_named_password_may_not_be_one_of_the_operator_s_secrets(name, meta, owner_uid):
    theirs = secret(name, {"pw": b"whatever"}, owner_uid, **meta)
    with refused("UntrustedSecret", "spec.accounting.database.external.passwordSecretRef", f"Secret hpc/{name}"):
        secret_trust.named_database_password(theirs, "hpc", name, "pw")


@pytest.mark.parametrize("found", [None, secret("site-db", {"password": b"x"})], ids=["no Secret", "no such key"])
def test_a_missing_spec_named_password_says_what_to_create(found):
    with refused("DatabasePasswordMissing", "passwordSecretRef", "Secret hpc/site-db with key 'pw' not found"):
        secret_trust.named_database_password(found, "hpc", "site-db", "pw")


@pytest.mark.parametrize("raw", [b"pass word", b"pass\tword", b"a#b", b"back\\slash", b'"quoted"', b"line\nbreak",
                                 "pässword".encode(), b"\xff\xfe", b""])
def test_a_spec_named_password_slurmdbd_conf_cannot_hold_is_refused_unquoted(raw):
    with refused("InvalidSecret", "passwordSecretRef", "Secret hpc/site-db, key 'pw'") as failure:
        secret_trust.named_database_password(secret("site-db", {"pw": raw}), "hpc", "site-db", "pw")
    if len(raw) > 2:
        assert raw.decode(errors="ignore") not in failure.value.message


def test_a_secret_that_is_not_base64_is_refused():
    broken = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "site-db", "namespace": "hpc"}, "data": {"pw": "%%%"}}
    with refused("InvalidSecret", "Secret hpc/site-db"):
        secret_trust.named_database_password(broken, "hpc", "site-db", "pw")


# ---------------------------------------------------------------- slurmdbd.conf's passwords


@pytest.mark.parametrize("password", ["pass word", "tab\there", "vt\vhere", "ff\fhere", "a#b", "back\\slash", '"q"', 'mid"dle',
                                      "new\nline", "cr\rhere", "nul\0", "del\x7f", "pässword", ""])
def test_slurmdbd_conf_refuses_passwords_its_parser_would_change(password):
    assert storage_password_problem(password)
    cluster, _ = load_with_uids(CLUSTER)
    with pytest.raises(ValueError, match="database password"):
        render_slurmdbd_conf(cluster, password)


@pytest.mark.parametrize("password", ["s3cret", "Xy_-Ab12", "!$%&'()*+,-./:;<=>?@[]^_`{|}~", "a=b"])
def test_slurmdbd_conf_takes_every_other_printable_password_as_one_value(password):
    assert storage_password_problem(password) is None
    cluster, _ = load_with_uids(CLUSTER)
    assert f"\nStoragePass={password}\n" in render_slurmdbd_conf(cluster, password)


# ---------------------------------------------------------------- the keyed config hash


def _accounting_hash(objects: list[dict]) -> str:
    (accounting,) = [o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "research-accounting"]
    return accounting["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]


def _render(password: str = PASSWORD, key: bytes = KEY) -> list[dict]:
    cluster, node_sets = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    return cluster_objects(cluster, node_sets, database_password=password, config_hash_key=config_hash_key(key))


def _slurmdbd_conf(objects: list[dict]) -> str:
    (conf,) = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "research-slurmdbd-config"]
    return base64.b64decode(conf["data"]["slurmdbd.conf"]).decode()


def test_slurmdbd_s_config_hash_cannot_be_tested_against_password_guesses():
    objects = _render()
    annotation = _accounting_hash(objects)
    conf = _slurmdbd_conf(objects)
    # what a reader of the pod template could compute for a guessed password without the key
    canonical = json.dumps({"slurmdbd.conf": conf}, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert annotation != hashlib.sha256(canonical).hexdigest()
    assert annotation == hmac.new(config_hash_key(KEY), canonical, hashlib.sha256).hexdigest()
    assert annotation == keyed_config_hash({"slurmdbd.conf": conf}, config_hash_key(KEY))
    assert PASSWORD not in json.dumps([o for o in objects if o["kind"] != "Secret"])


def test_slurmdbd_s_config_hash_follows_the_password_and_the_key():
    assert _accounting_hash(_render()) == _accounting_hash(_render())
    assert _accounting_hash(_render()) != _accounting_hash(_render(password="another-password"))
    assert _accounting_hash(_render()) != _accounting_hash(_render(key=bytes(1024)))


def test_the_config_hash_key_is_derived_not_the_auth_key_itself():
    derived = config_hash_key(KEY)
    assert len(derived) == 32 and KEY[:32] != derived and derived != config_hash_key(bytes(1024))
    with pytest.raises(ValueError, match="auth key is empty"):
        config_hash_key(b"")
    with pytest.raises(ValueError, match="at least 32"):
        keyed_config_hash({"slurmdbd.conf": "x"}, b"short")


def test_accounting_without_a_config_hash_key_is_refused():
    cluster, node_sets = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    with pytest.raises(ValueError, match="config_hash_key"):
        cluster_objects(cluster, node_sets, database_password=PASSWORD)
    off = set_path(set_path(CLUSTER, "spec.accounting.enabled", False), "spec.accounts", [])
    cluster, node_sets = load_with_uids(off, GPU_NODES, CPU_NODES)
    assert cluster_objects(cluster, node_sets, database_password=None)  # no slurmdbd, nothing to key


# ---------------------------------------------------------------- EnsureSecrets as a whole


class SecretsOnlyApi:
    """The two calls EnsureSecrets makes: get a Secret by name, create one."""

    def __init__(self, *existing: dict):
        self.secrets = {s["metadata"]["name"]: s for s in existing}
        self.created: list[str] = []

    def get(self, kind, namespace, name):
        assert kind.kind == "Secret" and namespace == "hpc"
        return self.secrets.get(name)

    def create(self, obj):
        name = obj["metadata"]["name"]
        assert name not in self.secrets, f"{name} created over an existing Secret"
        self.secrets[name] = obj
        self.created.append(name)
        return obj


class Events:
    def __init__(self):
        self.posted = []

    def normal(self, obj, reason, message):
        self.posted.append(("Normal", reason))

    warning = normal


def ensure(api: SecretsOnlyApi, document=CLUSTER) -> Run:
    raw = cluster_raw(document)
    run = Run(raw=raw, cluster=SlurmCluster.model_validate(raw))
    ClusterReconciler(api, lambda *_: None, Events()).ensure_secrets(run)
    return run


def test_a_new_cluster_gets_its_key_and_password_owned_by_it():
    api = SecretsOnlyApi()
    run = ensure(api)
    assert api.created == ["research-auth-key", "research-mariadb-password", "research-ssh-host-keys"]
    assert host_key_problem(base64.b64decode(api.secrets["research-ssh-host-keys"]["data"]["ssh_host_ed25519_key"])) is None
    key = base64.b64decode(api.secrets["research-auth-key"]["data"]["slurm.key"])
    assert len(key) == 1024 and run.config_hash_key == config_hash_key(key)
    for name in api.created:
        assert secret_trust.controlled_by(api.secrets[name], UID)
    assert run.database_password == base64.b64decode(api.secrets["research-mariadb-password"]["data"]["password"]).decode()
    assert storage_password_problem(run.database_password) is None


def test_the_cluster_s_own_secrets_are_read_not_made_again():
    cluster, _ = load_with_uids(CLUSTER)
    api = SecretsOnlyApi(auth_key_secret(cluster, KEY), database_password_secret(cluster, PASSWORD),
                         ssh_host_key_secret(cluster, HOST_KEY))
    run = ensure(api)
    assert api.created == [] and run.database_password == PASSWORD and run.config_hash_key == config_hash_key(KEY)


@pytest.mark.parametrize("planted_name", ["research-auth-key", "research-mariadb-password"])
def test_a_planted_secret_stops_the_step_before_anything_is_created(planted_name):
    data = {"slurm.key": KEY} if planted_name.endswith("key") else {"password": b"planted"}
    planted = secret(planted_name, data)
    api = SecretsOnlyApi(planted)
    with refused("UntrustedSecret", f"Secret hpc/{planted_name}"):
        ensure(api)
    assert api.created == [] and api.secrets == {planted_name: planted}


def test_an_external_database_gets_a_key_but_no_generated_password():
    external = set_path(CLUSTER, "spec.accounting.database", EXTERNAL)
    api = SecretsOnlyApi(secret("site-db", {"pw": b"site-db-password"}))
    run = ensure(api, external)
    assert api.created == ["research-auth-key", "research-ssh-host-keys"] and run.database_password == "site-db-password"


def test_without_ssh_no_host_key_is_made():
    api = SecretsOnlyApi()
    ensure(api, set_path(CLUSTER, "spec.login.ssh.enabled", False))
    assert api.created == ["research-auth-key", "research-mariadb-password"]


@pytest.mark.parametrize("data,problem", [
    ({}, "holds no host key"),
    ({"ssh_host_ed25519_key": b"not a key"}, "holds no unencrypted OpenSSH private key"),
])
def test_a_host_key_secret_sshd_cannot_use_is_refused_and_kept(data, problem):
    cluster, _ = load_with_uids(CLUSTER)
    broken = ssh_host_key_secret(cluster, b"x")
    broken["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    api = SecretsOnlyApi(auth_key_secret(cluster, KEY), database_password_secret(cluster, PASSWORD), broken)
    with refused("InvalidSecret", f"Secret hpc/research-ssh-host-keys {problem}"):
        ensure(api)
    assert api.created == []


def test_a_planted_host_key_is_refused():
    planted = secret("research-ssh-host-keys", {"ssh_host_ed25519_key": HOST_KEY})
    api = SecretsOnlyApi(planted)
    with refused("UntrustedSecret", "Secret hpc/research-ssh-host-keys"):
        ensure(api)
    assert api.created == []


def test_the_host_key_is_ed25519_in_openssh_format_and_new_each_time():
    first, second = new_host_key(), new_host_key()
    assert first.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----") and first != second
    assert public_host_key(first).startswith("ssh-ed25519 AAAA")


def test_an_external_database_naming_another_cluster_s_key_creates_nothing():
    external = set_path(CLUSTER, "spec.accounting.database",
                        {"external": {"host": "db.example.org", "passwordSecretRef": {"name": "other-auth-key", "key": "slurm.key"}}})
    api = SecretsOnlyApi(secret("other-auth-key", {"slurm.key": KEY}, "uid-of-SlurmCluster-other"))
    with refused("UntrustedSecret", "Secret hpc/other-auth-key"):
        ensure(api, external)
    assert api.created == []
