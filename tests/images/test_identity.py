"""Identity from a real directory, with the images' own programs (pytest -m images).

- Slurm image without SSSD running: nss_sss answers "unavailable" at once, so
  `getent passwd slurm` and an unknown name cost no waiting; the nsswitch lines,
  no ssh host keys, and sshd's effective defaults (root, password and
  keyboard-interactive login off) with a host key given at run time.
- ldap image: its entrypoint refuses environment values that would add LDIF or
  arguments, runs as root or as openldap, configures slapd from the environment,
  seeds the directory once from /etc/ldap-seed, serves it over StartTLS and ldaps with a
  CA made here by openssl, refuses plain-text operations and anonymous reads,
  accepts the admin password from a file, runs slapd as openldap, and after a
  restart keeps the data without seeding again.
- SSSD from the Slurm image with the sssd.conf that render/config/sssd_conf.py renders
  (StartTLS, certificate demanded): `getent passwd`, `id` give the directory's
  uid, gid and groups, `sss_ssh_authorizedkeys` prints alice's key, an unknown
  user is absent, a user added to slapd while sssd runs appears within the
  negative-cache time, a new group membership within the entry-cache time; and
  sssd refuses an sssd.conf that others can read. PAM's sshd account phase
  admits the login group only.
- sshd from the Slurm image, with a host key made at run time and keys from
  `sss_ssh_authorizedkeys`: alice logs in with her key (strict host-key
  checking) and `id` shows the directory's ids; a wrong key, an unknown user,
  root and password/keyboard-interactive logins are refused.

slapd and sssd run chrooted in their unpacked image roots inside one network
namespace made here (ksimg-identity-<pid>), so they talk over its loopback only;
the namespace, its processes and SSSD's state in the Slurm root are removed at
the end, and namespaces left by killed runs (their pid gone) at the start.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from kubeslurm.render.config.sssd_conf import SSSD_COMMAND, SssdConfig, render_sssd_conf
from tests.images.conftest import RootProcess, run_in_root, wait_for

pytestmark = pytest.mark.images

# One namespace per test run (pid in the name): a run clears only namespaces whose
# run is gone, never one that a concurrent run still uses. Not "ksl-": the
# real-Slurm tier (testbed/native_slurm) deletes every namespace named so.
NETNS_PREFIX = "ksimg-identity-"
NETNS = f"{NETNS_PREFIX}{os.getpid()}"
SUFFIX = "dc=example,dc=org"
ADMIN_DN = f"cn=admin,{SUFFIX}"
SSSD_BIND_DN = f"cn=sssd,ou=services,{SUFFIX}"
# Where the test puts files inside the roots (their own /tmp is not shared with the host's).
KST = "etc/kubeslurm-test"
NEGATIVE_CACHE_S = 15  # the renderer's default: what a site gets
ENTRY_CACHE_S = 20


def ssha(password: str) -> str:
    """An {SSHA} userPassword value, as slappasswd makes them."""
    salt = secrets.token_bytes(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# ---------------------------------------------------------------- the network namespace

def remove_netns(name: str) -> None:
    """Kill whatever runs in the namespace (slapd, sssd) and delete it."""
    if not Path(f"/run/netns/{name}").exists():
        return
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "delete", name], check=True)


def remove_namespaces_of_killed_runs() -> None:
    for path in Path("/run/netns").glob(f"{NETNS_PREFIX}*") if Path("/run/netns").is_dir() else ():
        run_pid = path.name.removeprefix(NETNS_PREFIX)
        if run_pid.isdigit() and not Path(f"/proc/{run_pid}").exists():
            remove_netns(path.name)


@pytest.fixture(scope="module")
def netns():
    if os.geteuid() != 0:
        pytest.skip("the image tier needs root: namespaces, chroot")
    remove_namespaces_of_killed_runs()
    remove_netns(NETNS)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(["ip", "-n", NETNS, "link", "set", "lo", "up"], check=True)
        yield NETNS
    finally:
        remove_netns(NETNS)


# ---------------------------------------------------------------- TLS material

@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost signed by it, and an unrelated CA."""
    d = tmp_path_factory.mktemp("identity-tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN=kubeslurm test {ca}")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=localhost")
    write(d / "ext.cnf", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                         "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "tls.crt", "-days", "2", "-extfile", "ext.cnf")
    return {name: d / name for name in ("ca.crt", "tls.crt", "tls.key", "other-ca.crt")}


# ---------------------------------------------------------------- the directory

def group_ldif(name: str, gid: int, members: list[str]) -> str:
    lines = [f"dn: cn={name},ou=groups,{SUFFIX}", "objectClass: posixGroup", f"cn: {name}", f"gidNumber: {gid}"]
    return "\n".join(lines + [f"memberUid: {m}" for m in members]) + "\n\n"


def user_ldif(name: str, uid: int, gid: int, ssh_key: str | None = None) -> str:
    lines = [f"dn: uid={name},ou=people,{SUFFIX}", "objectClass: inetOrgPerson", "objectClass: posixAccount",
             f"uid: {name}", f"cn: {name.title()} Researcher", f"sn: {name.title()}", f"uidNumber: {uid}",
             f"gidNumber: {gid}", f"homeDirectory: /home/{name}", "loginShell: /bin/bash"]
    if ssh_key:
        lines += ["objectClass: ldapPublicKey", f"sshPublicKey: {ssh_key}"]
    return "\n".join(lines) + "\n\n"


class Directory:
    """slapd from the ldap image, seeded with alice, bob and their groups."""

    def __init__(self, root: Path, netns: str, tls: dict[str, Path], log_dir: Path, alice_key: str):
        self.root, self.netns, self.log_dir = root, netns, log_dir
        self.sssd_password = secrets.token_urlsafe(18)
        self.admin_password = secrets.token_urlsafe(18)
        self.starts = 0
        self.process: RootProcess | None = None
        shutil.rmtree(root / "var/lib/ldap")
        (root / "var/lib/ldap").mkdir(mode=0o750)
        for name in ("ca.crt", "tls.crt", "tls.key"):
            shutil.copy(tls[name], _mkdir(root / "etc/ldap-tls") / name)
        (root / "etc/ldap-tls/tls.key").chmod(0o400)  # as a Secret volume would have it
        # With a trailing newline, as `kubectl create secret --from-file` often gets it.
        write(root / "etc/ldap-admin/password", self.admin_password + "\n", 0o400)
        write(root / KST / "ca.crt", tls["ca.crt"].read_text())
        write(root / KST / "other-ca.crt", tls["other-ca.crt"].read_text())
        # ldap-utils' -y sends the file's bytes as they are: no newline.
        write(root / KST / "sssd-password", self.sssd_password, 0o600)
        write(root / KST / "admin-password", self.admin_password, 0o600)
        write(root / "etc/ldap-seed/10-tree.ldif", "".join(
            f"dn: ou={ou},{SUFFIX}\nobjectClass: organizationalUnit\nou: {ou}\n\n"
            for ou in ("people", "groups", "services")))
        write(root / "etc/ldap-seed/20-services.ldif",
              f"dn: {SSSD_BIND_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
              f"cn: sssd\nuserPassword: {ssha(self.sssd_password)}\n")
        write(root / "etc/ldap-seed/30-people.ldif",
              user_ldif("alice", 20001, 20001, alice_key) + user_ldif("bob", 20002, 20002)
              + group_ldif("alice", 20001, []) + group_ldif("bob", 20002, [])
              + group_ldif("researchers", 30001, ["alice"]))

    def start(self) -> None:
        self.starts += 1
        self.process = RootProcess(
            self.root, ["/usr/local/bin/kubeslurm-ldap-entrypoint"], netns=self.netns,
            env={"LDAP_SUFFIX": SUFFIX, "LDAP_ADMIN_PASSWORD_FILE": "/etc/ldap-admin/password"},
            log=self.log_dir / f"slapd-{self.starts}.log")
        wait_for(lambda: self.search("-Y", "EXTERNAL", "-H", "ldapi:///", "-b", "", "-s", "base")[0] == 0
                 or self.stopped(), 60, "slapd answering on ldapi:///")
        assert not self.stopped(), self.process.output()

    def stopped(self) -> bool:
        return self.process.proc.poll() is not None

    def stop(self) -> None:
        if self.process:
            self.process.kill()

    def run(self, argv: list[str], env: dict | None = None) -> tuple[int, str]:
        return run_in_root(self.root, argv, timeout=30, netns=self.netns, env=env)

    def search(self, *args: str, env: dict | None = None) -> tuple[int, str]:
        return self.run(["ldapsearch", "-LLL", "-o", "nettimeout=5", *args], env=env)

    def add(self, ldif: str) -> None:
        write(self.root / KST / "add.ldif", ldif)
        rc, out = self.run(["ldapadd", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///", "-f", f"/{KST}/add.ldif"])
        assert rc == 0, out

    def modify(self, ldif: str) -> None:
        write(self.root / KST / "modify.ldif", ldif)
        rc, out = self.run(["ldapmodify", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///", "-f", f"/{KST}/modify.ldif"])
        assert rc == 0, out


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def ssh_keypair(root: Path, name: str) -> tuple[str, str]:
    """(public key line, private key) of a new ed25519 key, made by the Slurm image's ssh-keygen."""
    keydir = _mkdir(root / KST / "keygen")
    try:
        rc, out = run_in_root(root, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@example.org",
                                     "-f", f"/{KST}/keygen/{name}"])
        assert rc == 0, out
        return (keydir / f"{name}.pub").read_text().strip(), (keydir / name).read_text()
    finally:
        shutil.rmtree(keydir)


@pytest.fixture(scope="module")
def alice_keypair(unpacked) -> tuple[str, str]:
    return ssh_keypair(unpacked("slurm"), "alice")


@pytest.fixture(scope="module")
def alice_key(alice_keypair) -> str:
    return alice_keypair[0]


@pytest.fixture(scope="module")
def directory(unpacked, netns, tls, tmp_path_factory, alice_key):
    d = Directory(unpacked("ldap"), netns, tls, tmp_path_factory.mktemp("identity-logs"), alice_key)
    d.start()
    yield d
    d.stop()


# ---------------------------------------------------------------- SSSD

def reset_sssd_state(root: Path) -> None:
    """No config, caches or sockets of an earlier sssd in the (shared) Slurm root."""
    (root / "etc/sssd/sssd.conf").unlink(missing_ok=True)
    shutil.rmtree(root / "etc/sssd/ca", ignore_errors=True)
    for d in ("var/lib/sss/db", "var/lib/sss/mc", "var/lib/sss/pipes", "var/lib/sss/pipes/private"):
        for entry in (root / d).iterdir():
            if not entry.is_dir():
                entry.unlink()


SSSD_CONFIG = SssdConfig(
    uris=("ldap://127.0.0.1",),
    search_base=SUFFIX,
    ca_cert_path="/etc/sssd/ca/ca.crt",
    bind_dn=SSSD_BIND_DN,
    user_search_bases=(f"ou=people,{SUFFIX}",),
    group_search_bases=(f"ou=groups,{SUFFIX}",),
    login_groups=("researchers",),
    entry_cache_timeout=ENTRY_CACHE_S,
    entry_negative_timeout=NEGATIVE_CACHE_S,
)


def install_sssd_conf(root: Path, text: str, ca: Path, mode: int = 0o600) -> None:
    """What the pod's init container does: the Secret's sssd.conf at /etc/sssd, root 0600."""
    conf = root / "etc/sssd/sssd.conf"
    conf.write_text(text)
    os.chown(conf, 0, 0)
    conf.chmod(mode)
    write(root / "etc/sssd/ca/ca.crt", ca.read_text())


def in_slurm_root(root: Path, argv: list[str], timeout: float = 30) -> tuple[int, str]:
    return run_in_root(root, argv, timeout=timeout)


@pytest.fixture(scope="module")
def sssd(unpacked, directory, tls, tmp_path_factory):
    root = unpacked("slurm")
    reset_sssd_state(root)
    install_sssd_conf(root, render_sssd_conf(SSSD_CONFIG, directory.sssd_password), tls["ca.crt"])
    log = tmp_path_factory.mktemp("identity-sssd") / "sssd.log"
    process = RootProcess(root, list(SSSD_COMMAND), netns=directory.netns, log=log)
    try:
        wait_for(lambda: in_slurm_root(root, ["getent", "passwd", "alice"])[0] == 0
                 or process.proc.poll() is not None, 60, "sssd answering for alice")
        assert process.proc.poll() is None, f"sssd exited:\n{process.output()}"
        yield root
    finally:
        process.kill()
        reset_sssd_state(root)


# ---------------------------------------------------------------- Slurm image, no sssd

def test_slurm_image_identity_files(unpacked):
    root = unpacked("slurm")
    nsswitch = {line.split(":")[0]: line.split(":", 1)[1].split()
                for line in (root / "etc/nsswitch.conf").read_text().splitlines()
                if line and not line.startswith("#")}
    assert nsswitch["passwd"] == ["files", "sss"] and nsswitch["group"] == ["files", "sss"]
    assert nsswitch["shadow"] == ["files"]
    assert not list((root / "etc/ssh").glob("ssh_host_*")), "host keys must come from a Secret"
    assert (root / "run/sshd").is_dir()
    assert not (root / "etc/sssd/sssd.conf").exists()
    for program in ("usr/sbin/sssd", "usr/sbin/sshd", "usr/bin/sss_ssh_authorizedkeys", "usr/sbin/sssctl",
                    "usr/sbin/sss_cache"):
        assert (root / program).exists(), program
    assert list((root / "usr/lib").glob("*/libnss_sss.so.2")) and list((root / "usr/lib").glob("*/security/pam_sss.so"))


def test_without_sssd_lookups_do_not_wait(unpacked):
    root = unpacked("slurm")
    reset_sssd_state(root)
    # Twenty lookups of a name nobody has: each goes through nss_sss, which finds no sssd.
    script = "getent passwd slurm && for i in $(seq 20); do ! getent passwd no-such-user-$i || exit 1; done"
    t0 = time.monotonic()
    rc, out = in_slurm_root(root, ["sh", "-c", script])
    elapsed = time.monotonic() - t0
    assert rc == 0 and out.startswith("slurm:x:64030:64030:"), out
    assert elapsed < 3, f"21 lookups without sssd took {elapsed:.1f} s"


def test_sshd_defaults_with_a_host_key_given_at_run_time(unpacked):
    root = unpacked("slurm")
    keydir = _mkdir(root / KST / "sshd")
    try:
        rc, out = in_slurm_root(root, ["sh", "-c", f"ssh-keygen -q -t ed25519 -N '' -f /{KST}/sshd/host_key "
                                                   f"&& sshd -T -h /{KST}/sshd/host_key"])
        assert rc == 0, out
        effective = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        assert effective["permitrootlogin"] == "no"
        assert effective["passwordauthentication"] == "no"
        assert effective["kbdinteractiveauthentication"] == "no"
        assert effective["permitemptypasswords"] == "no"
        assert effective["usepam"] == "yes"
    finally:
        shutil.rmtree(root / KST)


# ---------------------------------------------------------------- the ldap image

def test_ldap_image_archive_and_layer(images, unpacked):
    with tarfile.open(images["ldap"].path) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]
        config = json.load(tar.extractfile(manifest["Config"]))["config"]
    assert "localhost/kubeslurm/ldap:2.6" in manifest["RepoTags"]
    assert config["Entrypoint"] == ["/usr/local/bin/kubeslurm-ldap-entrypoint"]
    assert config["Cmd"] == ["slapd"] and config["User"] == "0:0"
    assert set(config["ExposedPorts"]) == {"389/tcp", "636/tcp"}
    root = unpacked("ldap")
    openldap = next(int(line.split(":")[2]) for line in (root / "etc/passwd").read_text().splitlines()
                    if line.startswith("openldap:"))
    # nothing of the build's own database or configuration ships
    assert (root / "var/lib/ldap").stat().st_uid == openldap and not list((root / "var/lib/ldap").iterdir())
    assert not (root / "etc/ldap/slapd.d").exists()
    assert "sshPublicKey" in (root / "etc/ldap/schema/openssh-lpk.ldif").read_text()


@pytest.mark.parametrize("env,named", [
    ({"LDAP_SUFFIX": "dc=example,dc=org\nolcRootPW: x"}, "LDAP_SUFFIX"),
    ({"LDAP_SUFFIX": ""}, "LDAP_SUFFIX"),
    ({"LDAP_SUFFIX": "dc=example,dc=org]"}, "LDAP_SUFFIX"),
    ({"LDAP_SUFFIX": SUFFIX, "LDAP_ADMIN_DN": f"cn=admin,{SUFFIX}\nolcAccess: to * by * write"}, "LDAP_ADMIN_DN"),
    ({"LDAP_SUFFIX": SUFFIX, "LDAP_URLS": "ldap:/// $(touch /tmp/x)"}, "LDAP_URLS"),
    ({"LDAP_SUFFIX": SUFFIX, "LDAP_DEBUG_LEVEL": "256 -f /etc/shadow"}, "LDAP_DEBUG_LEVEL"),
    ({"LDAP_SUFFIX": SUFFIX, "LDAP_ADMIN_PASSWORD_FILE": "/no/such/file"}, "LDAP_ADMIN_PASSWORD_FILE"),
])
def test_ldap_entrypoint_refuses_values_that_would_add_ldif_or_arguments(unpacked, env, named):
    rc, out = run_in_root(unpacked("ldap"), ["/usr/local/bin/kubeslurm-ldap-entrypoint"], env=env)
    assert rc != 0 and named in out and "slapd starting" not in out, out


def test_ldap_entrypoint_runs_as_a_non_root_user(unpacked, tmp_path):
    """A pod with runAsUser: no chown, no -u/-g; the image's directories are openldap's."""
    root = unpacked("ldap")
    slapd = RootProcess(root, ["/usr/local/bin/kubeslurm-ldap-entrypoint"], userspec="openldap:openldap",
                        env={"LDAP_SUFFIX": SUFFIX, "LDAP_URLS": "ldapi:///"}, log=tmp_path / "slapd.log")
    base_entry = ["ldapsearch", "-LLL", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///", "-b", SUFFIX, "-s", "base", "dc"]
    try:
        wait_for(lambda: run_in_root(root, base_entry)[0] == 0 or slapd.proc.poll() is not None, 30,
                 "slapd started as openldap answering")
        assert slapd.proc.poll() is None, slapd.output()
        rc, out = run_in_root(root, base_entry)
        assert rc == 0 and "dc: example" in out, out  # the suffix entry the entrypoint made
        assert "seeding a new database" in slapd.output()
    finally:
        slapd.kill()
        # the directory fixture seeds its own database
        for entry in (root / "var/lib/ldap").iterdir():
            entry.unlink()


def test_directory_serves_the_seed_over_tls_only(directory):
    tls_env = {"LDAPTLS_CACERT": f"/{KST}/ca.crt", "LDAPTLS_REQCERT": "demand"}
    bind = ["-x", "-D", SSSD_BIND_DN, "-y", f"/{KST}/sssd-password", "-b", SUFFIX, "(uid=alice)",
            "uidNumber", "sshPublicKey"]
    rc, out = directory.search("-H", "ldap://127.0.0.1", *bind)
    assert rc == 13 and "Confidentiality required" in out, out
    for how in (["-H", "ldap://127.0.0.1", "-ZZ"], ["-H", "ldaps://127.0.0.1"]):
        rc, out = directory.search(*how, *bind, env=tls_env)
        assert rc == 0 and "uidNumber: 20001" in out and "sshPublicKey: ssh-ed25519 " in out, (how, out)
    rc, out = directory.search("-H", "ldaps://127.0.0.1", *bind,
                               env={"LDAPTLS_CACERT": f"/{KST}/other-ca.crt", "LDAPTLS_REQCERT": "demand"})
    assert rc != 0 and "uidNumber" not in out, "a certificate from another CA was accepted"
    rc, out = directory.search("-H", "ldaps://127.0.0.1", "-x", "-b", SUFFIX, "(uid=alice)", env=tls_env)
    assert "uidNumber" not in out and "uid=alice" not in out, "anonymous clients must read nothing"
    rc, out = directory.run(["ldapwhoami", "-x", "-H", "ldaps://127.0.0.1", "-D", ADMIN_DN,
                             "-y", f"/{KST}/admin-password"], env=tls_env)
    assert rc == 0 and out.strip().endswith(f"dn:{ADMIN_DN}"), out
    uids = {int(line.split()[1]) for pid in directory.process.namespace_pids("slapd")
            for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")}
    openldap = next(int(line.split(":")[2]) for line in (directory.root / "etc/passwd").read_text().splitlines()
                    if line.startswith("openldap:"))
    assert uids == {openldap}, f"slapd runs as {uids}, not openldap ({openldap})"


# ---------------------------------------------------------------- SSSD against it

def test_sssd_refuses_a_config_others_can_read(unpacked, directory, tls):
    root = unpacked("slurm")
    reset_sssd_state(root)
    try:
        install_sssd_conf(root, render_sssd_conf(SSSD_CONFIG, directory.sssd_password), tls["ca.crt"], mode=0o644)
        rc, out = run_in_root(root, list(SSSD_COMMAND), timeout=30, netns=directory.netns)
        assert rc != 0 and "File ownership and permissions check failed" in out, out
    finally:
        reset_sssd_state(root)


def test_the_rendered_sssd_sidecar_serves_clients_that_mount_its_sockets_read_only(unpacked, directory, tls, alice_key):
    """The sidecar of render/sssd_pods.py with the operator's rendered files, as a pod has them: the
    Secret's files under /etc/sssd-secret, emptyDirs (mode 0777, no pipes/private) for its sockets and
    cache. It makes them 0755, and a client container that mounts them read-only (nss, ssh keys)
    gets every answer while an unprivileged user can place nothing there."""
    from kubeslurm.api import load_documents
    from kubeslurm.render.config.sssd_conf import directory_files
    from kubeslurm.render.sssd_pods import SSSD_SECRET_MOUNT, sssd_container
    from tests.unit.manifests import contract_documents, set_path

    cluster_doc, *node_sets = contract_documents()
    cluster_doc = set_path(cluster_doc, "spec.identity", {"mode": "ldap", "ldap": {
        "uris": ["ldap://127.0.0.1"], "searchBase": SUFFIX, "bindDN": SSSD_BIND_DN,
        "bindPasswordSecretRef": {"name": "sssd-bind"}, "caCertificate": {"configMap": {"name": "ca"}}}})
    cluster = load_documents([cluster_doc, *node_sets]).clusters[0]
    root = unpacked("slurm")
    reset_sssd_state(root)
    secret_dir = _mkdir(root / SSSD_SECRET_MOUNT.lstrip("/"))
    for name, text in directory_files(cluster, directory.sssd_password, tls["ca.crt"].read_text()).items():
        write(secret_dir / name, text, 0o400)
    shutil.rmtree(root / "var/lib/sss/pipes/private")
    for d in ("var/lib/sss/pipes", "var/lib/sss/mc"):
        (root / d).chmod(0o777)  # as the kubelet makes an emptyDir
    sidecar = RootProcess(root, sssd_container(cluster)["command"], netns=directory.netns,
                          log=secret_dir.parent / "sidecar.log")
    try:
        probe = sssd_container(cluster)["startupProbe"]["exec"]["command"]
        wait_for(lambda: in_slurm_root(root, probe)[0] == 0 or sidecar.proc.poll() is not None, 60, "the startup probe")
        assert sidecar.proc.poll() is None, sidecar.output()
        client = ("for d in /var/lib/sss/pipes /var/lib/sss/mc; do mount --bind $d $d && mount -o remount,bind,ro $d; done; "
                  "stat -c '%a %U' /var/lib/sss/pipes /var/lib/sss/mc; getent passwd alice; id alice; sss_ssh_authorizedkeys alice; "
                  "runuser -u nobody -- touch /var/lib/sss/pipes/planted 2>/dev/null && echo PLANTED; "
                  "touch /var/lib/sss/pipes/planted 2>/dev/null && echo PLANTED-BY-ROOT; true")
        rc, out = in_slurm_root(root, ["sh", "-c", client])
        assert rc == 0, out
        assert out.splitlines() == [
            "755 root", "755 root", "alice:*:20001:20001:Alice Researcher:/home/alice:/bin/bash",
            "uid=20001(alice) gid=20001(alice) groups=20001(alice),30001(researchers)", alice_key], out
        assert (root / "etc/sssd/sssd.conf").stat().st_mode & 0o777 == 0o600
    finally:
        sidecar.kill()
        shutil.rmtree(secret_dir, ignore_errors=True)
        (root / "etc/sssd/ca.crt").unlink(missing_ok=True)
        (root / "run/sssd.pid").unlink(missing_ok=True)  # a pod's restarted sidecar gets a new /run
        (root / "var/lib/sss/pipes/private").mkdir(mode=0o750, exist_ok=True)
        (root / "var/lib/sss/pipes/private").chmod(0o750)
        (root / "var/lib/sss/pipes").chmod(0o755)
        (root / "var/lib/sss/mc").chmod(0o775)
        reset_sssd_state(root)


def test_sssd_answers_from_the_directory(sssd, alice_key):
    rc, out = in_slurm_root(sssd, ["getent", "passwd", "alice"])
    assert rc == 0 and out.strip() == "alice:*:20001:20001:Alice Researcher:/home/alice:/bin/bash", out
    rc, out = in_slurm_root(sssd, ["id", "alice"])
    assert rc == 0 and out.strip() == "uid=20001(alice) gid=20001(alice) groups=20001(alice),30001(researchers)", out
    rc, out = in_slurm_root(sssd, ["id", "bob"])
    assert rc == 0 and out.strip() == "uid=20002(bob) gid=20002(bob) groups=20002(bob)", out
    rc, out = in_slurm_root(sssd, ["getent", "group", "researchers"])
    assert rc == 0 and out.strip() == "researchers:*:30001:alice", out
    rc, out = in_slurm_root(sssd, ["sss_ssh_authorizedkeys", "alice"])
    assert rc == 0 and out.strip() == alice_key, out
    rc, out = in_slurm_root(sssd, ["sss_ssh_authorizedkeys", "bob"])
    assert out.strip() == "", out
    for nobody in ("mallory", "sssd-test-nobody"):
        rc, out = in_slurm_root(sssd, ["getent", "passwd", nobody])
        assert rc == 2 and out == "", (nobody, out)
    # login_groups=researchers: PAM's account phase for sshd (pam_sss, as Debian's
    # common-account has it) lets alice in and keeps bob out.
    rc, out = in_slurm_root(sssd, ["sssctl", "user-checks", "-a", "acct", "-s", "sshd", "alice"])
    assert "pam_acct_mgmt: Success" in out, out
    rc, out = in_slurm_root(sssd, ["sssctl", "user-checks", "-a", "acct", "-s", "sshd", "bob"])
    assert "pam_acct_mgmt: Permission denied" in out, out
    # Local accounts still come from files: the directory cannot shadow them.
    rc, out = in_slurm_root(sssd, ["id", "-u", "slurm"])
    assert out.strip() == "64030", out


def test_alice_logs_in_over_ssh_with_the_key_from_the_directory(sssd, directory, alice_keypair):
    """sshd from the Slurm image, keys from sss_ssh_authorizedkeys, host key given at run time."""
    ssh = _mkdir(sssd / KST / "ssh")
    # Her home, as the shared home volume will hold it: the session lands there.
    home = _mkdir(sssd / "home/alice")
    os.chown(home, 20001, 20001)
    home.chmod(0o700)
    sshd = None
    try:
        rc, out = in_slurm_root(sssd, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"/{KST}/ssh/host_key"])
        assert rc == 0, out
        write(ssh / "known_hosts", "127.0.0.1 " + (ssh / "host_key.pub").read_text())
        write(ssh / "alice", alice_keypair[1], 0o600)
        write(ssh / "mallory", ssh_keypair(sssd, "mallory")[1], 0o600)
        sshd = RootProcess(sssd, [
            "/usr/sbin/sshd", "-D", "-e", "-h", f"/{KST}/ssh/host_key", "-o", "ListenAddress=127.0.0.1",
            "-o", "AuthorizedKeysFile=none", "-o", "AuthorizedKeysCommand=/usr/bin/sss_ssh_authorizedkeys %u",
            "-o", "AuthorizedKeysCommandUser=nobody"], netns=directory.netns, log=ssh.parent / "sshd.log")

        def ssh_as(user: str, key: str, *extra: str) -> tuple[int, str]:
            return run_in_root(sssd, ["ssh", "-F", "/dev/null", "-i", f"/{KST}/ssh/{key}", "-o", "BatchMode=yes",
                                      "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile=/{KST}/ssh/known_hosts",
                                      "-o", "ConnectTimeout=5", *extra, f"{user}@127.0.0.1", "id && pwd"],
                               timeout=30, netns=directory.netns)

        def alice_logged_in() -> tuple[int, str] | bool:
            if sshd.proc.poll() is not None:
                return True  # sshd exited: stop waiting, the assert below shows its log
            rc, out = ssh_as("alice", "alice")
            return (rc, out) if rc == 0 else False

        result = wait_for(alice_logged_in, 30, "alice's ssh login", interval=0.5)
        assert sshd.proc.poll() is None, sshd.output()
        assert result[1].splitlines() == ["uid=20001(alice) gid=20001(alice) groups=20001(alice),30001(researchers)",
                                          "/home/alice"], result
        for user, key in (("alice", "mallory"), ("mallory", "mallory"), ("root", "alice")):
            rc, out = ssh_as(user, key)
            assert rc == 255 and "Permission denied (publickey)." in out, (user, key, out)
        # The server offers public keys only: no password, no keyboard-interactive.
        rc, out = ssh_as("alice", "mallory", "-o", "PreferredAuthentications=password,keyboard-interactive")
        assert rc == 255 and "Permission denied (publickey)." in out, out
    finally:
        if sshd:
            sshd.kill()
        shutil.rmtree(ssh.parent, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_the_login_pod_s_rendered_sshd_admits_the_login_group_and_makes_the_home(sssd, directory, alice_keypair):
    """The very sshd command a login pod runs in ldap mode (login_statefulset.sshd_command):
    keys from the directory, PAM's account phase for the login group, pam_mkhomedir (the image's
    /etc/pam.d/sshd) making alice's home at her first login, mode 0700."""
    from kubeslurm.api import load_documents
    from kubeslurm.render.login.statefulset import AUTHORIZED_KEYS_DIR, SSH_HOST_KEY_DIR, sshd_command
    from kubeslurm.render.k8s.secrets import SSH_HOST_KEY_FILE
    from tests.unit.manifests import contract_documents, set_path

    cluster_doc, *node_sets = contract_documents()
    cluster_doc = set_path(cluster_doc, "spec.identity", {"mode": "ldap", "ldap": {
        "uris": ["ldap://127.0.0.1"], "searchBase": SUFFIX, "bindDN": SSSD_BIND_DN,
        "bindPasswordSecretRef": {"name": "sssd-bind"}, "caCertificate": {"configMap": {"name": "ca"}},
        "loginGroups": ["researchers"]}})
    command = sshd_command(load_documents([cluster_doc, *node_sets]).clusters[0])
    ssh = _mkdir(sssd / KST / "login-ssh")
    host_key_dir, keys_dir = _mkdir(sssd / SSH_HOST_KEY_DIR.lstrip("/")), _mkdir(sssd / AUTHORIZED_KEYS_DIR.lstrip("/"))
    home = sssd / "home/alice"
    shutil.rmtree(home, ignore_errors=True)
    sshd = None
    try:
        rc, out = in_slurm_root(sssd, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{SSH_HOST_KEY_DIR}/{SSH_HOST_KEY_FILE}"])
        assert rc == 0, out
        write(ssh / "known_hosts", "127.0.0.1 " + (host_key_dir / f"{SSH_HOST_KEY_FILE}.pub").read_text())
        write(ssh / "alice", alice_keypair[1], 0o600)
        sshd = RootProcess(sssd, command, netns=directory.netns, log=ssh.parent / "login-sshd.log")

        def ssh_as(user: str) -> tuple[int, str]:
            return run_in_root(sssd, ["ssh", "-F", "/dev/null", "-i", f"/{KST}/login-ssh/alice", "-o", "BatchMode=yes",
                                      "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile=/{KST}/login-ssh/known_hosts",
                                      "-o", "ConnectTimeout=5", f"{user}@127.0.0.1", "id; pwd; stat -c %U:%a ."],
                               timeout=30, netns=directory.netns)

        def logged_in():
            if sshd.proc.poll() is not None:
                return True
            rc, out = ssh_as("alice")
            return (rc, out) if rc == 0 else False

        result = wait_for(logged_in, 30, "alice's login through the rendered sshd", interval=0.5)
        assert sshd.proc.poll() is None, sshd.output()
        assert result[1].splitlines()[-3:] == [
            "uid=20001(alice) gid=20001(alice) groups=20001(alice),30001(researchers)", "/home/alice", "alice:700"], result
        assert (home / ".bashrc").exists(), "the home is made from /etc/skel"
        for user in ("root", "mallory"):
            rc, out = ssh_as(user)
            assert rc == 255 and "Permission denied (publickey)." in out, (user, out)
    finally:
        if sshd:
            sshd.kill()
        shutil.rmtree(ssh, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(host_key_dir, ignore_errors=True)
        shutil.rmtree(keys_dir, ignore_errors=True)


def test_a_user_added_while_sssd_runs_appears_in_bounded_time(sssd, directory):
    rc, out = in_slurm_root(sssd, ["getent", "passwd", "carol"])
    assert rc == 2, "carol exists before she was added"  # and now sits in the negative cache
    directory.add(user_ldif("carol", 20003, 20003) + group_ldif("carol", 20003, []))
    t0 = time.monotonic()
    wait_for(lambda: in_slurm_root(sssd, ["getent", "passwd", "carol"])[0] == 0, NEGATIVE_CACHE_S + 15,
             "carol to appear", interval=0.5)
    appeared = time.monotonic() - t0
    rc, out = in_slurm_root(sssd, ["id", "carol"])
    assert out.strip() == "uid=20003(carol) gid=20003(carol) groups=20003(carol)", out

    directory.modify(f"dn: cn=researchers,ou=groups,{SUFFIX}\nchangetype: modify\nadd: memberUid\nmemberUid: bob\n")
    t0 = time.monotonic()
    wait_for(lambda: "30001(researchers)" in in_slurm_root(sssd, ["id", "bob"])[1], ENTRY_CACHE_S + 15,
             "bob's new group to show", interval=1)
    joined = time.monotonic() - t0
    print(f"\nnew user visible after {appeared:.1f} s (negative cache {NEGATIVE_CACHE_S} s); "
          f"new group membership after {joined:.1f} s (entry cache {ENTRY_CACHE_S} s)")


def test_directory_restart_keeps_the_data_and_does_not_seed_again(directory, sssd):
    directory.stop()
    directory.start()
    log = directory.process.output()
    assert "seeding" not in log, log
    rc, out = directory.search("-Y", "EXTERNAL", "-H", "ldapi:///", "-b", SUFFIX, "(uid=carol)", "uidNumber")
    assert rc == 0 and "uidNumber: 20003" in out, "carol, added after the seed, was lost"
    rc, out = directory.search("-Y", "EXTERNAL", "-H", "ldapi:///", "-b", SUFFIX, "(objectClass=posixAccount)", "uid")
    assert sorted(line.split()[1] for line in out.splitlines() if line.startswith("uid:")) == ["alice", "bob", "carol"]
