"""The container images (images/build.py): archive structure, content, and the
programs in them really running, without Kubernetes.

- archive: manifest.json tags match what the operator renders, the config's
  entrypoint/user/labels, diff_id == sha256 of the one layer, sizes.
- content: no device nodes, nothing in /proc /sys /dev, no apt lists, no
  private keys (slurm.key, munge.key, ssh host keys, PEM private keys), owners
  and modes the pods rely on.
- Slurm: versions; the controller pod's init script and `slurmctld -D -i` with
  the config rendered from examples/research.yaml (scontrol ping says UP, no
  plugstack glob error, the daemon runs as slurm).
- MariaDB: the entrypoint on an empty data directory with the pod's env; TCP
  opens only once the database and user exist; the pod's readiness probe; a
  restart keeps the data; slurmdbd from the Slurm image creates its tables in it.
- ldap: the generic checks here; slapd and SSSD running against it are in
  test_identity.py.
- fake-gpu: the generic checks here; its plugin registering with a kubelet is in
  test_fake_gpu_image.py.
- operator: `kubeslurm --help` and `kubeslurm render` as uid 65532, same output
  as the host's.
- containerd (when installed): images/load.sh into a private containerd, then
  `ctr run --rm` of each image.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from tests.images.conftest import REPO, layer_member, run_in_root, wait_for

pytestmark = pytest.mark.images

NAMES = ["slurm", "mariadb", "ldap", "operator", "fake-gpu"]
SLURM_UID = 64030
MiB = 2**20


def rendered_objects() -> list[dict]:
    p = subprocess.run([str(Path(sys.executable).parent / "kubeslurm"), "render", "-f",
                        str(REPO / "examples/research.yaml"), "--objects-only"],
                       capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def statefulset(objects, name) -> dict:
    return next(o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == name)


def operator_image_in_deploy() -> str:
    for doc in yaml.safe_load_all((REPO / "deploy/operator.yaml").read_text()):
        if doc and doc.get("kind") == "Deployment":
            return doc["spec"]["template"]["spec"]["containers"][0]["image"]
    raise AssertionError("deploy/operator.yaml has no Deployment")


def expected(builder) -> dict:
    from kubeslurm.api.slurm_cluster import DEFAULT_MARIADB_IMAGE, DEFAULT_SLURM_IMAGE

    return {
        # 445 MiB seen: Slurm ~125, Open MPI + mpi4py ~255, SSSD (with the python3 that
        # sssd-common depends on) + sshd ~57, crun + umoci ~9 (containers as job steps).
        "slurm": dict(tag=DEFAULT_SLURM_IMAGE, entrypoint=None, cmd=["/bin/sh"], user="0:0",
                      version=r"24\.11\.\d+", size=(50, 500)),
        "mariadb": dict(tag=DEFAULT_MARIADB_IMAGE, entrypoint=["/usr/local/bin/kubeslurm-mariadb-entrypoint"],
                        cmd=["mariadbd"], user="0:0", version=r"11\.\d+\.\d+", size=(100, 450)),
        # The directory for tests and small sites; no API default names it yet.
        "ldap": dict(tag="localhost/kubeslurm/ldap:2.6", entrypoint=["/usr/local/bin/kubeslurm-ldap-entrypoint"],
                     cmd=["slapd"], user="0:0", version=r"2\.6\.\d+", size=(60, 250)),
        "operator": dict(tag=operator_image_in_deploy(), entrypoint=["/opt/kubeslurm/bin/kubeslurm"],
                         cmd=["run"], user="65532:65532",
                         version=re.escape(builder.project_version()), size=(60, 400)),
        # Only the kind provider of the e2e tier loads it (testbed/cluster_providers.py); 136 MiB
        # seen: python3 ~60, grpcio + protobuf ~40.
        "fake-gpu": dict(tag=f"localhost/kubeslurm/fake-gpu:{builder.project_version()}",
                         entrypoint=["/opt/fake-gpu/bin/python", "-m", "testbed.local_cluster.fake_gpu"],
                         cmd=["--help"], user="0:0", version=re.escape(builder.project_version()),
                         size=(60, 250)),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------- archives

@pytest.mark.parametrize("name", NAMES)
def test_archive_structure(name, images, builder):
    want = expected(builder)[name]
    path = images[name].path
    with tarfile.open(path) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))
        assert len(manifest) == 1
        entry = manifest[0]
        assert want["tag"] in entry["RepoTags"], f"{want['tag']} (what the operator uses) not in {entry['RepoTags']}"
        assert all(t.startswith(want["tag"].rsplit(":", 1)[0] + ":") for t in entry["RepoTags"])
        assert len(entry["Layers"]) == 1 and entry["Layers"][0].endswith("/layer.tar")
        assert set(names) >= {"manifest.json", entry["Config"], entry["Layers"][0]}
        config = json.load(tar.extractfile(entry["Config"]))
        assert hashlib.sha256(tar.extractfile(entry["Config"]).read()).hexdigest() + ".json" == entry["Config"]
        layer_sha = hashlib.sha256()
        f = tar.extractfile(entry["Layers"][0])
        while chunk := f.read(1 << 20):
            layer_sha.update(chunk)
    assert config["os"] == "linux" and config["architecture"] in ("amd64", "arm64")
    assert config["rootfs"] == {"type": "layers", "diff_ids": [f"sha256:{layer_sha.hexdigest()}"]}
    c = config["config"]
    assert c.get("Entrypoint") == want["entrypoint"]
    assert c["Cmd"] == want["cmd"]
    assert c["User"] == want["user"]
    assert c["WorkingDir"].startswith("/")
    assert any(e.startswith("PATH=") for e in c["Env"])
    version = c["Labels"]["org.opencontainers.image.version"]
    assert re.fullmatch(want["version"], version), version
    assert any(t.endswith(":" + version) for t in entry["RepoTags"]), "no tag names the full version"
    low, high = want["size"]
    assert low * MiB < images[name].size < high * MiB, f"{name}: {images[name].size / MiB:.0f} MiB"


def test_warm_build_is_cached_and_fast(images, builder):
    for name in NAMES:
        t0 = time.monotonic()
        r = builder.build_image(name)
        assert r.cached and r.path == images[name].path
        assert time.monotonic() - t0 < 10


PRIVATE_KEY_NAMES = ["slurm.key", "munge.key", "jwt*.key", "ssh_host_*key", "*.pem", "*.key",
                     "host-ca.crt"]


def scan_layer(path: Path) -> dict:
    """Walks the layer once: problems found, and the entries and small files tests look at."""
    problems, entries, files = [], {}, {}
    tar, member = layer_member(path)
    with tar, tarfile.open(fileobj=tar.extractfile(member), mode="r|") as layer:
        for ti in layer:
            n = ti.name
            entries[n] = ti
            if n.startswith("/") or ".." in n.split("/"):
                problems.append(f"unsafe path {n}")
            if ti.ischr() or ti.isblk() or ti.isfifo():
                problems.append(f"device/fifo {n}")
            if ti.uname or ti.gname:
                problems.append(f"owner names in {n} ({ti.uname}/{ti.gname}); numeric ids only")
            top, _, rest = n.partition("/")
            if top in ("proc", "sys", "dev", "tmp") and rest:
                problems.append(f"content under /{top}: {n}")
            for d in ("var/lib/apt/lists/", "var/cache/apt/", "usr/share/man/", "tmp/kubeslurm-build"):
                if n.startswith(d) and ti.isreg():
                    problems.append(f"build leftover {n}")
            base = n.rsplit("/", 1)[-1]
            if ti.isreg():
                if n in ("etc/passwd", "etc/group") or (
                        ti.size < (1 << 20) and (any(fnmatch.fnmatch(base, p) for p in PRIVATE_KEY_NAMES)
                                                 or n.startswith("etc/"))):
                    files[n] = layer.extractfile(ti).read()
                if base in ("slurm.key", "munge.key", "host-ca.crt") or fnmatch.fnmatch(base, "ssh_host_*key"):
                    problems.append(f"key file {n}")
                elif n in files and re.search(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----", files[n]):
                    problems.append(f"private key in {n}")
    return {"problems": problems, "entries": entries, "files": files}


@pytest.fixture(scope="session")
def layers(images):
    return {name: scan_layer(images[name].path) for name in NAMES}


def uid_of(files: dict, user: str) -> int:
    for line in files["etc/passwd"].decode().splitlines():
        f = line.split(":")
        if f[0] == user:
            return int(f[2])
    raise AssertionError(f"no user {user} in etc/passwd")


@pytest.mark.parametrize("name", NAMES)
def test_layer_has_no_devices_secrets_or_build_leftovers(name, layers):
    scan = layers[name]
    assert scan["problems"] == []
    for d in ("proc", "sys", "dev", "tmp", "usr/bin/env"):
        assert d in scan["entries"], f"{d} missing"
    assert "bin/sh" in scan["entries"] or "usr/bin/sh" in scan["entries"]
    assert scan["entries"]["tmp"].mode & 0o1777 == 0o1777
    assert scan["files"].get("etc/machine-id", b"") == b""
    assert scan["files"].get("etc/resolv.conf", b"") == b""


def test_slurm_layer_contract(layers):
    e = layers["slurm"]["entries"]
    assert uid_of(layers["slurm"]["files"], "slurm") == SLURM_UID
    for d in ("run/slurmctld", "run/slurmdbd"):
        assert e[d].isdir() and (e[d].uid, e[d].gid) == (SLURM_UID, SLURM_UID), d
    assert e["run/slurm"].isdir()
    assert "etc/slurm/plugstack.conf" not in e and "etc/slurm/plugstack.conf.d" not in e
    for cmd in ("usr/sbin/slurmctld", "usr/sbin/slurmd", "usr/sbin/slurmdbd", "usr/sbin/sackd",
                "usr/bin/scontrol", "usr/bin/sbatch", "usr/bin/srun", "usr/bin/sacct",
                "usr/bin/sacctmgr", "usr/bin/install", "usr/bin/chown", "usr/bin/chmod",
                "usr/bin/timeout"):
        assert cmd in e, cmd
    assert any(n.endswith("/slurm-wlm/auth_slurm.so") for n in e)


def test_mariadb_layer_contract(layers):
    e, files = layers["mariadb"]["entries"], layers["mariadb"]["files"]
    mysql = uid_of(files, "mysql")
    assert e["var/lib/mysql"].isdir() and e["var/lib/mysql"].uid == mysql
    assert not [n for n in e if n.startswith("var/lib/mysql/")], "the image must ship an empty data dir"
    ep = e["usr/local/bin/kubeslurm-mariadb-entrypoint"]
    assert ep.isreg() and ep.mode & 0o755 == 0o755 and ep.uid == 0
    for cmd in ("usr/bin/mariadb-admin", "usr/bin/mariadb", "usr/sbin/mariadbd", "usr/bin/mariadb-install-db",
                "usr/bin/openssl", "usr/bin/my_print_defaults", "usr/bin/zstd"):
        assert cmd in e, cmd
    # The system tables a first start unpacks (setup.sh): made at build time, sparse and compressed.
    template = e["usr/share/kubeslurm-mariadb/datadir-template.tar.zst"]
    assert template.isreg() and template.uid == 0 and template.mode & 0o777 == 0o644
    assert template.size < 2 << 20, template.size
    assert b"bind-address = 0.0.0.0" in files["etc/mysql/mariadb.conf.d/99-kubeslurm.cnf"]


def test_operator_layer_contract(layers):
    e, files = layers["operator"]["entries"], layers["operator"]["files"]
    assert uid_of(files, "nonroot") == 65532
    assert e["home/nonroot"].uid == 65532
    assert "opt/kubeslurm/bin/kubeslurm" in e
    assert "opt/kubeslurm/bin/pip" not in e
    writable = [n for n, ti in e.items() if n.startswith("opt/") and (ti.uid != 0 or ti.mode & 0o002)
                and not ti.issym()]
    assert writable == [], "the operator user must not be able to change its own code"


# ---------------------------------------------------------------- running: Slurm

def test_slurm_versions(unpacked, images):
    root = unpacked("slurm")
    rc, out = run_in_root(root, ["sh", "-c", "slurmctld -V && slurmd -V && sackd -h"])
    assert rc == 0, out
    version = images["slurm"].tags[-1].rsplit(":", 1)[1]
    assert out.count(f"slurm-wlm {version}") == 2, out
    assert "--conf-server" in out


def test_slurmctld_runs_the_rendered_config(unpacked):
    """The controller pod, without Kubernetes: its init script, then its command."""
    root = unpacked("slurm")
    objects = rendered_objects()
    sts = statefulset(objects, "research-controller")
    pod = sts["spec"]["template"]["spec"]
    init_cmd = pod["initContainers"][0]["command"]
    main_cmd = pod["containers"][0]["command"]
    # With accounting the container's sh first waits for slurmdbd, then execs `slurmctld "$@"`
    # (FIRST_START_WAITS_FOR_ACCOUNTING: run by sh in tests/unit/test_controller_first_start.py,
    # and on every cluster the e2e tier starts). Accounting is taken out of slurm.conf below, so
    # slurmctld is started here the way that script execs it.
    if main_cmd[0] != "slurmctld":
        assert main_cmd[:2] == ["/bin/sh", "-c"] and main_cmd[3] == "slurmctld", main_cmd
        main_cmd = [main_cmd[3], *main_cmd[6:]]
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "research-slurm-config")["data"]
    # The volumes the pod mounts: ConfigMaps, Secret, emptyDirs, state PVC.
    make_empty_dirs(root, pod, objects)
    (root / "etc/slurm-config").mkdir(exist_ok=True)
    # Without accounting: a first start (no state files) with
    # AccountingStorageType=accounting_storage/slurmdbd ends in "fatal: slurmdbd
    # must be up at slurmctld start time"; slurmdbd is tested with MariaDB below.
    config["slurm.conf"] = re.sub(r"(?m)^AccountingStorage.*\n", "", config["slurm.conf"])
    for fname, text in config.items():
        (root / "etc/slurm-config" / fname).write_text(text)
    (root / "etc/slurm-key").mkdir(exist_ok=True)
    (root / "etc/slurm-key/slurm.key").write_bytes(secrets.token_bytes(1024))
    (root / "etc/slurm-key/slurm.key").chmod(0o400)
    shutil.rmtree(root / "var/spool/slurmctld")
    (root / "var/spool/slurmctld").mkdir()
    ctl = "research-controller-0"
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n10.254.254.1 research-slurmctld-0 {ctl}.research-controller {ctl}\n")
    script = f"""
{init_cmd[2]}
{' '.join(main_cmd)} > /tmp/slurmctld.log 2>&1 &
pid=$!
i=0
until scontrol ping 2>/dev/null | grep -q 'is UP'; do
    i=$((i + 1)); [ $i -lt 100 ] || break; sleep 0.2
done
scontrol ping
echo "slurmctld $(grep '^Uid:' /proc/$pid/status)"
ls -ld /etc/slurm/slurm.key /var/spool/slurmctld
kill $pid; wait $pid || true
echo ---- slurmctld log; cat /tmp/slurmctld.log
"""
    rc, out = run_in_root(root, [init_cmd[0], "-c", script], new_net=True, hostname=ctl, timeout=90)
    assert rc == 0, out
    assert re.search(r"Slurmctld\(primary\) at research-controller-0 is UP", out), out
    assert re.search(rf"slurmctld Uid:\s+{SLURM_UID}\s", out), "slurmctld did not drop to slurm:\n" + out
    assert "-rw------- 1 slurm slurm" in out, out
    log = out.split("---- slurmctld log", 1)[1]
    assert "glob" not in log and "plugstack" not in log, log
    assert "_prepare_run_dir" not in log, log


def make_empty_dirs(root: Path, pod: dict, objects: list[dict]) -> None:
    """What the kubelet does for emptyDir volumes (an empty folder at every mount path) and for
    ConfigMap volumes (the ConfigMap's files there, e.g. the users table install-config reads)."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    config_maps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    for container in pod.get("initContainers", []) + pod["containers"]:
        for mount in container.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            if mount.get("subPath") or not ("emptyDir" in volume or "configMap" in volume):
                continue
            path = root / mount["mountPath"].lstrip("/")
            path.mkdir(parents=True, exist_ok=True)
            for fname, text in config_maps.get(volume.get("configMap", {}).get("name"), {}).items():
                (path / fname).write_text(text)


# ---------------------------------------------------------------- running: MariaDB

def mariadb_env(objects) -> dict:
    pod = statefulset(objects, "research-mariadb")["spec"]["template"]["spec"]
    env = {}
    for e in pod["containers"][0]["env"]:
        env[e["name"]] = e.get("value", "")
    return env


def test_mariadb_entrypoint_and_slurmdbd(unpacked, root_processes, tmp_path):
    objects = rendered_objects()
    pod = statefulset(objects, "research-mariadb")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = mariadb_env(objects)
    # SQL quoting in the entrypoint must survive ' \\ ` $ and spaces.
    password = "q'w\\x `y`$z-" + secrets.token_urlsafe(12)
    root = unpacked("mariadb")
    # The password comes as a file (the pod mounts it from its Secret), never as a variable.
    assert "MARIADB_PASSWORD" not in env
    password_file = root / env["MARIADB_PASSWORD_FILE"].lstrip("/")
    password_file.parent.mkdir(parents=True, exist_ok=True)
    password_file.write_text(password + "\n")  # kubectl create secret --from-file keeps a newline
    password_file.chmod(0o400)
    port = free_port()
    # The pod's args plus a port of our own (this runs in the host's network).
    args = container["args"] + [f"--port={port}", "--bind-address=127.0.0.1"]
    entrypoint = ["/usr/local/bin/kubeslurm-mariadb-entrypoint"]

    current = {"password": password}

    def client(*argv, user="slurm", pw=None):
        pw = current["password"] if pw is None else pw
        return run_in_root(root, ["mariadb", "--protocol=tcp", "-h127.0.0.1", f"-P{port}",
                                  f"--user={user}", f"--password={pw}", "-N", "-B", *argv], timeout=30)

    log1 = tmp_path / "mariadb-1.log"
    db = root_processes(root, entrypoint + args, env=env, log=log1)
    # The first TCP connection must find the database and the user: they are made
    # before any server listens.
    wait_for(lambda: port_open(port) or db.proc.poll() is not None, 120, "MariaDB on TCP")
    assert db.proc.poll() is None, log1.read_text()
    rc, out = client("-e", "SHOW DATABASES")
    assert rc == 0 and env["MARIADB_DATABASE"] in out.split(), out + log1.read_text()
    assert "initialising a new database" in log1.read_text()
    # The readiness probe, as the pod runs it (but on our port).
    probe = container["readinessProbe"]["exec"]["command"]
    probe = [a if not a.startswith("--port=") else f"--port={port}" for a in probe]
    assert run_in_root(root, probe, timeout=30)[0] == 0
    # root only through the socket (or the random password nobody saw); mariadbd runs as mysql.
    assert client("-e", "SELECT 1", user="root", pw="")[0] != 0
    pids = db.namespace_pids("mariadbd")
    assert pids, "mariadbd not found"
    mysql_uid = int(next(ln for ln in (root / "etc/passwd").read_text().splitlines()
                         if ln.startswith("mysql:")).split(":")[2])
    uid = int(Path(f"/proc/{pids[0]}/status").read_text().split("Uid:")[1].split()[0])
    assert uid == mysql_uid
    assert "GENERATED ROOT PASSWORD" not in log1.read_text() and password not in log1.read_text()
    # The SQL file that made the user (it holds the password) is gone once mariadbd serves.
    assert not list((root / "tmp").glob("kubeslurm-mariadb-init.*")), list((root / "tmp").iterdir())
    # mariadbd (and all it starts) inherits no password: /proc/<pid>/environ shows none
    environ = Path(f"/proc/{pids[0]}/environ").read_bytes()
    assert b"MARIADB_PASSWORD=" not in environ and password.encode() not in environ
    # TLS with the entrypoint's EC key and certificate, made once beside the data (not MariaDB's RSA
    # one made at every start): mysql's own, mode 0600.
    rc, out = client("-e", "SHOW STATUS LIKE 'Ssl_cipher'")
    assert rc == 0 and len(out.split()) == 2, out
    assert "made the server's TLS key and certificate" in log1.read_text()
    tls_key, tls_cert = (root / "var/lib/mysql" / f"kubeslurm-tls-{part}.pem" for part in ("key", "cert"))
    for path in (tls_key, tls_cert):
        assert path.stat().st_uid == mysql_uid and path.stat().st_mode & 0o777 == 0o600, path
    rc, out = run_in_root(root, ["openssl", "x509", "-in", "/var/lib/mysql/kubeslurm-tls-cert.pem", "-noout", "-text"])
    assert rc == 0 and "id-ecPublicKey" in out, out
    first_cert = tls_cert.read_bytes()

    # slurmdbd.conf cannot carry that password (Slurm's parser eats the \); the
    # operator generates URL-safe ones (secrets.token_urlsafe), so switch to such.
    password = secrets.token_urlsafe(24)
    rc, out = client("-e", f"SET PASSWORD = PASSWORD('{password}')", pw=current["password"])
    assert rc == 0, out
    current["password"] = password

    # slurmdbd from the Slurm image creates its tables in that database: the
    # accounting pod's init script, then its command (on free ports, host network).
    slurm_root = unpacked("slurm")
    dbd_port = free_port()
    acct = statefulset(objects, "research-accounting")["spec"]["template"]["spec"]
    dbd_conf = next(o for o in objects if o["kind"] == "Secret"
                    and o["metadata"]["name"] == "research-slurmdbd-config")["stringData"]["slurmdbd.conf"]
    dbd_conf = re.sub(r"(?m)^StorageHost=.*$", "StorageHost=127.0.0.1", dbd_conf)
    dbd_conf = re.sub(r"(?m)^StoragePort=.*$", f"StoragePort={port}", dbd_conf)
    dbd_conf = re.sub(r"(?m)^StoragePass=.*$", lambda _: "StoragePass=" + password, dbd_conf)
    dbd_conf = re.sub(r"(?m)^DbdPort=.*$", f"DbdPort={dbd_port}", dbd_conf)
    for d, files in (("etc/slurm-config", {"slurmdbd.conf": dbd_conf}),
                     ("etc/slurm-key", {"slurm.key": secrets.token_hex(512)})):
        (slurm_root / d).mkdir(exist_ok=True)
        for n, text in files.items():
            (slurm_root / d / n).write_text(text)
    shutil.rmtree(slurm_root / "etc/slurm", ignore_errors=True)
    (slurm_root / "etc/slurm").mkdir()
    make_empty_dirs(slurm_root, acct, objects)
    init = acct["initContainers"][0]
    rc, out = run_in_root(slurm_root, init["command"], timeout=60)
    assert rc == 0, out
    # slurmdbd's container waits for the database Service named in its env, then runs slurmdbd
    # and watches it listen; here the database is MariaDB on 127.0.0.1:port.
    container = acct["containers"][0]
    dbd_env = {e["name"]: e["value"] for e in container["env"]}
    assert dbd_env == {"DATABASE_HOST": "research-database", "DATABASE_PORT": "3306", "SLURMDBD_PORT": "6819"}
    dbd_env.update(DATABASE_HOST="127.0.0.1", DATABASE_PORT=str(port), SLURMDBD_PORT=str(dbd_port))
    dbd_log = tmp_path / "slurmdbd.log"
    dbd = root_processes(slurm_root, container["command"], env=dbd_env, log=dbd_log)
    try:
        wait_for(lambda: port_open(dbd_port) or dbd.proc.poll() is not None, 60, "slurmdbd to listen")
    except AssertionError as e:
        raise AssertionError(f"{e}; its log:\n{dbd_log.read_text()}") from None
    assert dbd.proc.poll() is None, dbd_log.read_text()
    rc, out = client("-e", f"SHOW TABLES FROM {env['MARIADB_DATABASE']}")
    assert rc == 0 and "cluster_table" in out.split(), out
    assert "fatal" not in dbd_log.read_text(), dbd_log.read_text()
    dbd.kill()

    # A restart keeps the database and its users; the password file is not read again.
    for pid in db.namespace_pids("mariadbd"):
        os.kill(pid, signal.SIGTERM)
    rc, _ = db.wait(60)
    assert rc == 0, log1.read_text()
    log2 = tmp_path / "mariadb-2.log"
    password_file.chmod(0o600)
    password_file.write_text("other")
    db2 = root_processes(root, entrypoint + args, env=env, log=log2)
    wait_for(lambda: port_open(port) or db2.proc.poll() is not None, 120, "MariaDB after a restart")
    assert "initialising" not in log2.read_text()
    assert "made the server's TLS key" not in log2.read_text() and tls_cert.read_bytes() == first_cert
    rc, out = client("-e", f"SHOW TABLES FROM {env['MARIADB_DATABASE']}")
    assert rc == 0 and "cluster_table" in out.split(), out


def test_mariadb_entrypoint_as_its_own_user_after_an_interrupted_first_start(unpacked, root_processes, tmp_path):
    """Started as user mysql (no root to take ownership) on a data directory whose first
    initialisation was cut short: it starts over from the image's template, then serves the
    database and user, and root cannot log in (socket only, and this is not OS root)."""
    root = unpacked("mariadb")
    datadir = root / "tmp/interrupted"
    (datadir / "mysql").mkdir(parents=True)
    (datadir / "ibdata1").write_bytes(b"half written")
    (datadir / ".kubeslurm-initialising").touch()
    mysql = next(ln for ln in (root / "etc/passwd").read_text().splitlines() if ln.startswith("mysql:")).split(":")
    for path in (datadir, datadir / "mysql", datadir / "ibdata1", datadir / ".kubeslurm-initialising"):
        os.chown(path, int(mysql[2]), int(mysql[3]))
    password = secrets.token_urlsafe(16)
    env = {"MARIADB_DATABASE": "slurm_acct", "MARIADB_USER": "slurm", "MARIADB_PASSWORD": password, "HOME": "/tmp"}
    sock = "/tmp/interrupted.sock"
    log = tmp_path / "mariadb.log"
    db = root_processes(root, ["/usr/local/bin/kubeslurm-mariadb-entrypoint", "--datadir=/tmp/interrupted",
                               f"--socket={sock}", "--skip-networking"],
                        env=env, userspec="mysql:mysql", log=log)
    wait_for(lambda: (root / sock.lstrip("/")).exists() or db.proc.poll() is not None, 120, "MariaDB on its socket")
    assert db.proc.poll() is None, log.read_text()
    text = log.read_text()
    assert "did not finish; starting it again" in text and "database initialised: slurm_acct, user slurm" in text, text
    assert not (datadir / ".kubeslurm-initialising").exists()
    assert {p.stat().st_uid for p in datadir.rglob("*")} == {int(mysql[2])}

    def client(user: str, pw: str, *argv: str) -> tuple[int, str]:
        return run_in_root(root, ["mariadb", f"--socket={sock}", f"--user={user}", f"--password={pw}",
                                  "-N", "-B", *argv], timeout=30, userspec="mysql:mysql")

    rc, out = wait_for(lambda: (r := client("slurm", password, "-e", "SHOW DATABASES"))[0] == 0 and r,
                       30, "the user to log in")
    assert "slurm_acct" in out.split(), out
    rc, out = client("root", "", "-e", "SELECT 1")
    assert rc != 0 and "Access denied" in out, out


def test_mariadb_entrypoint_takes_a_password_from_a_variable_or_a_file_not_both(unpacked):
    root = unpacked("mariadb")
    (root / "tmp/both").write_text("from-the-file")
    both = {"MARIADB_USER": "slurm", "MARIADB_PASSWORD": "from-the-env", "MARIADB_PASSWORD_FILE": "/tmp/both"}
    rc, out = run_in_root(root, ["/usr/local/bin/kubeslurm-mariadb-entrypoint", "--datadir=/tmp/fresh-both"], env=both)
    assert rc != 0 and "both MARIADB_PASSWORD and MARIADB_PASSWORD_FILE are set" in out, out
    missing = {"MARIADB_USER": "slurm", "MARIADB_PASSWORD_FILE": "/run/secrets/none/password"}
    rc, out = run_in_root(root, ["/usr/local/bin/kubeslurm-mariadb-entrypoint", "--datadir=/tmp/fresh-missing"], env=missing)
    assert rc != 0 and "MARIADB_PASSWORD_FILE names /run/secrets/none/password, which is not a readable file" in out, out
    assert "from-the" not in out


def test_mariadb_entrypoint_passes_other_commands(unpacked):
    rc, out = run_in_root(unpacked("mariadb"), ["/usr/local/bin/kubeslurm-mariadb-entrypoint",
                                                "mariadb-admin", "--version"])
    assert rc == 0 and "11." in out, out


# ---------------------------------------------------------------- running: operator

def test_operator_runs_as_nonroot(unpacked):
    root = unpacked("operator")
    shutil.copy(REPO / "examples/research.yaml", root / "tmp/research.yaml")
    env = {"PATH": "/opt/kubeslurm/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/home/nonroot",
           "PYTHONDONTWRITEBYTECODE": "1"}
    rc, out = run_in_root(root, ["sh", "-c", "id -u && kubeslurm --help && python3 -V"],
                          env=env, userspec="65532:65532")
    assert rc == 0, out
    assert out.splitlines()[0] == "65532"
    assert " run" in out and "render" in out
    assert "Python 3.1" in out
    rc, out = run_in_root(root, ["/opt/kubeslurm/bin/kubeslurm", "render", "-f", "/tmp/research.yaml"],
                          env=env, userspec="65532:65532")
    host = subprocess.run([str(Path(sys.executable).parent / "kubeslurm"), "render", "-f",
                           str(REPO / "examples/research.yaml")], capture_output=True, text=True, check=True)
    assert rc == 0, out
    assert out == host.stdout + host.stderr


# ---------------------------------------------------------------- containerd

def test_containerd_imports_and_runs_the_images(containerd, images):
    subprocess.run(["bash", str(REPO / "images/load.sh"), "--address", containerd.address,
                    *[str(images[n].path) for n in NAMES]], check=True, capture_output=True, timeout=600)
    listed = containerd.ctr("images", "ls", "-q").stdout.split()
    for n in NAMES:
        for tag in images[n].tags:
            assert tag in listed, f"{tag} not imported: {listed}"
    runs = {
        "slurm": (["slurmctld", "-V"], "slurm-wlm 24.11"),
        "mariadb": (["mariadb-admin", "--version"], "11."),
        "ldap": (["sh", "-c", "slapd -VV 2>&1"], "slapd 2.6"),
        "operator": (["sh", "-c", "id -u; kubeslurm --help"], "65532"),
        "fake-gpu": (["/opt/fake-gpu/bin/python", "-m", "testbed.local_cluster.fake_gpu", "--help"], "--device-dir"),
    }
    for n, (cmd, want) in runs.items():
        cid = f"ksl-img-test-{n}-{os.getpid()}"
        p = containerd.ctr("run", "--rm", images[n].tags[0], cid, *cmd, timeout=120)
        assert want in p.stdout, f"{n}: {p.stdout}{p.stderr}"
