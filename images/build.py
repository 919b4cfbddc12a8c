#!/usr/bin/env python3
"""Build kubeslurm's container images without a Docker engine or a registry.

    images/build.py [--force] [--load [--address SOCK]] [--json] [NAME...]

NAME is slurm, mariadb, ldap or operator (default: all four). Each image is

1. the Debian root that images/build-rootfs.sh builds (and caches) from the
   image's packages.txt,
2. plus images/NAME/setup.sh run in a chroot over an overlay of that root
   (the same script the Dockerfile RUNs, so both builders agree; the cached root
   is never modified),
3. written as a docker-archive tar: manifest.json (RepoTags), an image config
   (Entrypoint, Cmd, Env, User, WorkingDir, Labels) and one uncompressed
   layer.tar without device nodes, /proc, /sys, /dev or /tmp contents, apt
   caches, documentation (copyright files stay), man pages or locales.

The tar is cached by content: ${KUBESLURM_CACHE:-~/.cache/kubeslurm}/images/
NAME-<hash>.tar, where <hash> covers the package list, images/NAME/ (but not its
Dockerfile), this script, build-rootfs.sh and, for the operator, pyproject.toml,
operator/ and templates/. An unchanged input returns the cached tar at once;
NAME.tar next to it is a symlink to the newest one, and older NAME-*.tar are
removed. `ctr -n k8s.io images import --all-platforms TAR` (images/load.sh)
imports a tar into containerd; `docker load -i TAR` works too.

Building needs root (debootstrap, overlayfs, chroot), Debian's mirror and, for
the operator, PyPI. Only the standard library is used, so the host's python3
runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BUILD_ROOTFS = HERE / "build-rootfs.sh"
# The stage (setup.sh's files, the operator source) appears at this path in the
# chroot; setup.sh finds its files next to itself.
STAGE_IN_ROOT = "tmp/kubeslurm-build"
# The PATH of every root file system we build and enter (the images, the native Slurm hosts).
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    name: str
    repository: str
    title: str
    description: str
    entrypoint: list[str] | None
    cmd: list[str]
    user: str
    env: list[str]
    working_dir: str = "/"
    exposed_ports: tuple[str, ...] = ()
    # dpkg package whose upstream version names the image, or None: pyproject's.
    version_package: str | None = None
    # How many leading version components each tag keeps (2 -> "24.11").
    tag_depths: tuple[int, ...] = (0,)
    # Extra source trees (relative to the repo) copied to the stage as src/.
    source: tuple[str, ...] = ()
    needs_network: bool = False


IMAGES: dict[str, ImageSpec] = {
    spec.name: spec
    for spec in [
        ImageSpec(
            name="slurm",
            repository="localhost/kubeslurm/slurm",
            title="kubeslurm Slurm",
            description="Debian trixie's Slurm: slurmctld, slurmd, slurmdbd, sackd and the client commands",
            # The pods always name their command (slurmctld -D, slurmd -D -Z ...).
            entrypoint=None,
            cmd=["/bin/sh"],
            # Root on purpose: slurmd must be root to start jobs as their users;
            # slurmctld and slurmdbd drop to SlurmUser=slurm (uid 64030) themselves.
            user="0:0",
            env=[f"PATH={CHROOT_PATH}"],
            exposed_ports=("6817/tcp", "6818/tcp", "6819/tcp"),
            version_package="slurmctld",
            tag_depths=(2, 3),  # 24.11 and 24.11.5
        ),
        ImageSpec(
            name="mariadb",
            repository="localhost/kubeslurm/mariadb",
            title="kubeslurm MariaDB",
            description="Debian trixie's MariaDB with an entrypoint that creates the accounting database and user",
            entrypoint=["/usr/local/bin/kubeslurm-mariadb-entrypoint"],
            cmd=["mariadbd"],
            # Starts as root to chown the data volume; mariadbd drops to mysql (--user=mysql).
            user="0:0",
            env=[f"PATH={CHROOT_PATH}"],
            exposed_ports=("3306/tcp",),
            version_package="mariadb-server",
            tag_depths=(1, 2, 3),  # 11, 11.8 and 11.8.x
        ),
        ImageSpec(
            name="ldap",
            repository="localhost/kubeslurm/ldap",
            title="kubeslurm LDAP directory",
            description="Debian trixie's slapd (OpenLDAP) with an entrypoint that configures, seeds and "
                        "serves one directory, with the openssh-lpk schema",
            entrypoint=["/usr/local/bin/kubeslurm-ldap-entrypoint"],
            cmd=["slapd"],
            # Starts as root to bind 389/636 and own the data volume; slapd drops to openldap (-u/-g).
            user="0:0",
            env=[f"PATH={CHROOT_PATH}"],
            exposed_ports=("389/tcp", "636/tcp"),
            version_package="slapd",
            tag_depths=(2, 3),  # 2.6 and 2.6.10
        ),
        ImageSpec(
            name="fake-gpu",
            repository="localhost/kubeslurm/fake-gpu",
            title="kubeslurm fake GPU device plugin",
            description="testbed/local_cluster/fake_gpu as an image: a kubelet device plugin with fake "
                        "nvidia.com/gpu devices, run as a DaemonSet by the e2e tier's kind provider",
            entrypoint=["/opt/fake-gpu/bin/python", "-m", "testbed.local_cluster.fake_gpu"],
            cmd=["--help"],
            # Root: mknod of the fake /dev/nvidiaN and the socket in the kubelet's plugin folder.
            user="0:0",
            env=[f"PATH=/opt/fake-gpu/bin:{CHROOT_PATH}", "PYTHONPATH=/opt/fake-gpu/lib/kubeslurm",
                 "KUBESLURM_CACHE=/opt/fake-gpu/stubs", "PYTHONUNBUFFERED=1"],
            tag_depths=(0,),  # the project's version from pyproject.toml
            # the device-plugin protocol is kubeslurm's (operator/kubeslurm/device_plugin/protocol.py)
            source=("testbed/local_cluster/fake_gpu", "operator/kubeslurm/__init__.py",
                    "operator/kubeslurm/device_plugin/__init__.py", "operator/kubeslurm/device_plugin/protocol.py",
                    "operator/kubeslurm/device_plugin/deviceplugin_v1beta1.proto"),
            needs_network=True,
        ),
        ImageSpec(
            name="operator",
            repository="localhost/kubeslurm/operator",
            title="kubeslurm operator",
            description="The kubeslurm operator (kopf), installed in a venv on Debian trixie's python3",
            entrypoint=["/opt/kubeslurm/bin/kubeslurm"],
            cmd=["run"],
            user="65532:65532",
            env=[f"PATH=/opt/kubeslurm/bin:{CHROOT_PATH}", "PYTHONUNBUFFERED=1",
                 # the device plugin's gRPC stubs, generated at build time (setup.sh)
                 "KUBESLURM_CACHE=/opt/kubeslurm/stubs",
                 # the Deployment mounts the root read-only; bytecode is compiled at build time
                 "PYTHONDONTWRITEBYTECODE=1", "HOME=/home/nonroot"],
            working_dir="/home/nonroot",
            tag_depths=(0,),  # the full version from pyproject.toml, e.g. 0.1.0
            source=("pyproject.toml", "operator", "templates"),
            needs_network=True,
        ),
    ]
}


def cache_dir() -> Path:
    return Path(os.environ.get("KUBESLURM_CACHE") or Path.home() / ".cache/kubeslurm")


def images_dir() -> Path:
    return cache_dir() / "images"


def log(msg: str) -> None:
    print(f"images/build.py: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ inputs

def _source_files(rel: str) -> list[Path]:
    top = REPO / rel
    if top.is_file():
        return [top]
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames
                             if d != "__pycache__" and not d.endswith(".egg-info"))
        out += [Path(dirpath) / f for f in sorted(filenames) if not f.endswith((".pyc", ".pyo"))]
    return out


def input_files(spec: ImageSpec) -> list[Path]:
    """Every file whose content decides the image (the cache key)."""
    files = [Path(__file__).resolve(), BUILD_ROOTFS]
    files += sorted(p for p in (HERE / spec.name).iterdir()
                    if p.is_file() and p.name != "Dockerfile" and not p.name.startswith("."))
    for rel in spec.source:
        files += _source_files(rel)
    return files


def input_hash(spec: ImageSpec) -> str:
    h = hashlib.sha256()
    h.update(f"suite={os.environ.get('KUBESLURM_SUITE', 'trixie')}\n".encode())
    for path in input_files(spec):
        data = path.read_bytes()
        executable = os.access(path, os.X_OK)
        h.update(f"{path.relative_to(REPO)}\0{int(executable)}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


def project_version() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import re
        m = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
        return m.group(1) if m else "0"
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def dpkg_version(root: Path, package: str) -> str:
    """Upstream version of PACKAGE in ROOT: '1:11.8.9+ds-0+deb13u1' -> '11.8.9'."""
    current = None
    for line in (root / "var/lib/dpkg/status").read_text().splitlines():
        if line.startswith("Package: "):
            current = line.split(": ", 1)[1]
        elif current == package and line.startswith("Version: "):
            v = line.split(": ", 1)[1]
            v = v.split(":", 1)[-1]           # epoch
            v = v.rsplit("-", 1)[0]           # Debian revision
            return v.split("+", 1)[0].split("~", 1)[0]
    raise RuntimeError(f"package {package} is not installed in {root}")


def tags_for(spec: ImageSpec, version: str) -> list[str]:
    parts = version.split(".")
    tags = []
    for depth in spec.tag_depths:
        tag = ".".join(parts[:depth]) if depth else version
        if tag not in tags:
            tags.append(tag)
    return [f"{spec.repository}:{t}" for t in tags]


# ------------------------------------------------------------------ the layer

# Paths (relative, no leading slash) whose contents never ship. The directories
# themselves stay: the runtime mounts over /proc, /sys, /dev; /tmp stays 1777.
EMPTY_DIRS = {"proc", "sys", "dev", "tmp", "var/tmp", "var/cache/apt", "var/lib/apt/lists",
              "usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/linda",
              "var/cache/man", "var/cache/debconf/tmp", "root/.cache", "var/log/apt",
              "var/log/journal", "run/systemd"}
SKIP_FILES = {".kubeslurm-rootfs-complete", ".kubeslurm-packages",
              "var/cache/debconf/config.dat-old", "var/cache/debconf/templates.dat-old",
              "var/lib/dpkg/status-old", "var/lib/dpkg/diversions-old", "etc/shadow-",
              "etc/gshadow-", "etc/passwd-", "etc/group-", "etc/subuid-", "etc/subgid-"}
# Host- or instance-specific files that ship empty (runtimes mount their own).
BLANK_FILES = {"etc/resolv.conf", "etc/hostname", "etc/machine-id"}


def _keep(rel: str, is_dir: bool) -> bool:
    if rel in SKIP_FILES:
        return False
    parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if parent in EMPTY_DIRS:
        return False
    if rel.startswith("usr/share/doc/"):
        # Licences stay (copyright files), the rest of the documentation goes.
        return is_dir or rel.endswith("/copyright")
    if rel.startswith("usr/share/locale/"):
        return rel == "usr/share/locale/locale.alias"
    if rel.startswith("var/log/") and not is_dir:
        return False
    return True


class _HashingWriter:
    def __init__(self, f):
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        return self.f.write(b)


def write_layer(root: Path, out: Path) -> tuple[str, int, dict]:
    """Write ROOT as an uncompressed layer tar; returns (sha256 hex, size, stats)."""
    stats = {"files": 0, "skipped_special": 0, "bytes": 0}
    with open(out, "wb") as raw:
        hw = _HashingWriter(raw)
        with tarfile.open(fileobj=hw, mode="w|", format=tarfile.PAX_FORMAT) as tar:

            def add(path: Path, rel: str) -> None:
                ti = tar.gettarinfo(str(path), arcname=rel)
                ti.uname = ti.gname = ""  # numeric ids only: names would be the host's
                ti.mtime = int(ti.mtime)
                if ti.isreg() and rel in BLANK_FILES:
                    ti.size = 0
                    tar.addfile(ti)
                elif ti.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(ti, f)
                    stats["bytes"] += ti.size
                else:
                    tar.addfile(ti)
                stats["files"] += 1

            for dirpath, dirnames, filenames in os.walk(root):
                d = Path(dirpath)
                rel_dir = "" if d == root else d.relative_to(root).as_posix()
                if rel_dir in EMPTY_DIRS:
                    dirnames[:] = []
                    continue
                keep_dirs = []
                for name in sorted(dirnames):
                    rel = f"{rel_dir}/{name}" if rel_dir else name
                    p = d / name
                    if not _keep(rel, is_dir=not p.is_symlink()):
                        continue
                    if p.is_symlink():  # os.walk lists symlinks to directories as dirs
                        add(p, rel)
                    else:
                        add(p, rel)
                        keep_dirs.append(name)
                dirnames[:] = keep_dirs
                for name in sorted(filenames):
                    rel = f"{rel_dir}/{name}" if rel_dir else name
                    p = d / name
                    if not _keep(rel, is_dir=False):
                        continue
                    mode = p.lstat().st_mode
                    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                        stats["skipped_special"] += 1  # devices, fifos, sockets
                        continue
                    add(p, rel)
    return hw.sha.hexdigest(), hw.size, stats


# ------------------------------------------------------------------ staging

def _stage_in_namespace(args: argparse.Namespace) -> None:
    """Runs inside `unshare --mount`: every mount made here dies with the process.

    Mounts an overlay (lower: the cached root), runs setup.sh in a chroot,
    writes the layer, and prints a JSON result on stdout."""
    spec = IMAGES[args.name]
    work = Path(args.work)
    lower = Path(args.rootfs)
    merged = work / "merged"
    for d in ("upper", "ovl-work", "merged"):
        (work / d).mkdir(exist_ok=True)
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={lower},upperdir={work / 'upper'},workdir={work / 'ovl-work'}",
                    str(merged)], check=True)
    stage = merged / STAGE_IN_ROOT
    shutil.copytree(HERE / spec.name, stage, ignore=shutil.ignore_patterns("Dockerfile"))
    for rel in spec.source:
        src, dst = REPO / rel, stage / "src" / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        else:
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(
                "__pycache__", "*.pyc", "*.egg-info"))
    resolv = merged / "etc/resolv.conf"
    if spec.needs_network:
        resolv.unlink(missing_ok=True)
        shutil.copy2("/etc/resolv.conf", resolv)
    subprocess.run(["mount", "-t", "proc", "proc", str(merged / "proc")], check=True)
    subprocess.run(["mount", "--rbind", "/dev", str(merged / "dev")], check=True)
    env = [f"PATH={CHROOT_PATH}", "LC_ALL=C.UTF-8", "HOME=/root"]
    if spec.needs_network:
        env += _network_env(stage)
    t0 = time.monotonic()
    p = subprocess.run(
        ["chroot", str(merged), "/usr/bin/env", "-i", *env, "/bin/sh", f"/{STAGE_IN_ROOT}/setup.sh"],
        stdout=sys.stderr, stderr=sys.stderr)
    subprocess.run(["umount", "-R", str(merged / "dev")], check=True)
    subprocess.run(["umount", str(merged / "proc")], check=True)
    if p.returncode != 0:
        raise SystemExit(f"images/{spec.name}/setup.sh failed ({p.returncode}) in the chroot")
    setup_s = time.monotonic() - t0
    shutil.rmtree(stage)
    if spec.needs_network:
        resolv.unlink(missing_ok=True)
        resolv.touch()
    version = (dpkg_version(merged, spec.version_package) if spec.version_package
               else project_version())
    t0 = time.monotonic()
    digest, size, stats = write_layer(merged, work / "layer.tar")
    print(json.dumps({"diff_id": digest, "size": size, "version": version, "stats": stats,
                      "setup_s": round(setup_s, 1), "layer_s": round(time.monotonic() - t0, 1)}))


# Proxy and package-index settings of the host that pip in the chroot should use.
PASSED_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT")


def _network_env(stage: Path) -> list[str]:
    """Environment for a setup.sh that downloads (pip): the host's proxy settings
    and the host's CA bundle. Networks that intercept TLS add their CA to the
    host's bundle only, and Debian's bundle in the new root lacks it. The bundle
    is copied into the stage, which is deleted before the layer is written: it
    never ships."""
    env = [f"{k}={os.environ[k]}" for k in PASSED_ENV if os.environ.get(k)]
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("REQUESTS_CA_BUNDLE"),
                      os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            shutil.copyfile(candidate, stage / "host-ca.crt")
            ca = f"/{STAGE_IN_ROOT}/host-ca.crt"
            env += [f"PIP_CERT={ca}", f"SSL_CERT_FILE={ca}", f"REQUESTS_CA_BUNDLE={ca}"]
            break
    return env


def build_rootfs(spec: ImageSpec) -> Path:
    p = subprocess.run(["bash", str(BUILD_ROOTFS), spec.name, str(HERE / spec.name / "packages.txt")],
                       stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{BUILD_ROOTFS} {spec.name} failed ({p.returncode}); see above")
    return Path(p.stdout.strip().splitlines()[-1])


def _arch() -> str:
    try:
        arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        arch = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64", "armhf": "arm"}.get(arch, arch)


def image_config(spec: ImageSpec, version: str, diff_id: str, ihash: str) -> dict:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    config: dict = {
        "Env": spec.env,
        "Cmd": spec.cmd,
        "User": spec.user,
        "WorkingDir": spec.working_dir,
        "Labels": {
            "org.opencontainers.image.title": spec.title,
            "org.opencontainers.image.description": spec.description,
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.base.name": f"debian:{os.environ.get('KUBESLURM_SUITE', 'trixie')}",
            "io.kubeslurm.image.input-hash": ihash,
        },
    }
    if spec.entrypoint:
        config["Entrypoint"] = spec.entrypoint
    if spec.exposed_ports:
        config["ExposedPorts"] = {p: {} for p in spec.exposed_ports}
    return {
        "architecture": _arch(),
        "os": "linux",
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": created,
                     "created_by": f"images/build.py {spec.name} (debootstrap + images/{spec.name}/setup.sh)"}],
    }


def write_docker_archive(out: Path, layer: Path | bytes, diff_id: str, config: dict, tags: list[str],
                         mtime: int | None = None) -> None:
    """The one docker-archive writer (also of the local cluster's system images):
    manifest.json, the image config named by its hash, one layer named by its diff_id
    (hex), and the legacy `repositories` file. mtime: of every member (default now;
    0 makes the tar reproducible byte for byte)."""
    config_bytes = json.dumps(config, indent=2, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = f"{diff_id}/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": tags, "Layers": [layer_name]}]
    repositories: dict = {}
    for t in tags:
        repo, tag = t.rsplit(":", 1)
        repositories.setdefault(repo, {})[tag] = diff_id
    now = int(time.time()) if mtime is None else mtime

    def member(name: str, size: int, mode: int = 0o644, kind=tarfile.REGTYPE) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode, ti.mtime, ti.type = size, mode, now, kind
        return ti

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(member(diff_id, 0, 0o755, tarfile.DIRTYPE))
        if isinstance(layer, bytes):
            tar.addfile(member(layer_name, len(layer)), io.BytesIO(layer))
        else:
            with open(layer, "rb") as f:
                tar.addfile(member(layer_name, layer.stat().st_size), f)
        for name, data in [(config_name, config_bytes),
                           ("manifest.json", json.dumps(manifest).encode()),
                           ("repositories", json.dumps(repositories).encode())]:
            tar.addfile(member(name, len(data)), io.BytesIO(data))


@dataclasses.dataclass
class Result:
    name: str
    path: Path
    tags: list[str]
    size: int
    cached: bool
    seconds: float


def build_image(name: str, force: bool = False) -> Result:
    spec = IMAGES[name]
    t0 = time.monotonic()
    ihash = input_hash(spec)
    out_dir = images_dir()
    out = out_dir / f"{name}-{ihash}.tar"
    link = out_dir / f"{name}.tar"
    if out.is_file() and not force:
        tags = read_manifest(out)[0]["RepoTags"]
        _update_link(link, out)
        return Result(name, out, tags, out.stat().st_size, True, time.monotonic() - t0)

    if os.geteuid() != 0:
        raise SystemExit("images/build.py: building an image needs root "
                         "(debootstrap, overlayfs, chroot); the cache has no "
                         f"{out.name} for the current inputs")
    rootfs = build_rootfs(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=out_dir))
    try:
        log(f"{name}: setup.sh over {rootfs.name}, then the layer")
        p = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", sys.executable,
             str(Path(__file__).resolve()), "_stage", name, str(rootfs), str(work)],
            stdout=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"building the {name} layer failed ({p.returncode}); see above")
        staged = json.loads(p.stdout.strip().splitlines()[-1])
        tags = tags_for(spec, staged["version"])
        config = image_config(spec, staged["version"], staged["diff_id"], ihash)
        tmp_out = work / "image.tar"
        write_docker_archive(tmp_out, work / "layer.tar", staged["diff_id"], config, tags)
        os.replace(tmp_out, out)
        log(f"{name}: {', '.join(tags)}; setup {staged['setup_s']} s, layer "
            f"{staged['layer_s']} s, {staged['stats']['files']} entries, "
            f"{staged['stats']['skipped_special']} device/fifo/socket entries left out")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _update_link(link, out)
    for old in out_dir.glob(f"{name}-*.tar"):
        if old != out:
            old.unlink(missing_ok=True)
    return Result(name, out, tags, out.stat().st_size, False, time.monotonic() - t0)


def _update_link(link: Path, target: Path) -> None:
    try:
        if link.is_symlink() and os.readlink(link) == target.name:
            return
        tmp = link.with_name(f".{link.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target.name)
        os.replace(tmp, link)
    except OSError:
        pass  # a read-only cache is fine for a warm build


def read_manifest(archive: Path) -> list[dict]:
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile("manifest.json"))


def load(paths: list[Path], address: str | None) -> None:
    cmd = ["bash", str(HERE / "load.sh")]
    if address:
        cmd += ["--address", address]
    subprocess.run(cmd + [str(p) for p in paths], check=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_stage"]:
        ns = argparse.Namespace(name=argv[1], rootfs=argv[2], work=argv[3])
        _stage_in_namespace(ns)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"images to build: {', '.join(IMAGES)}")
    ap.add_argument("--force", action="store_true", help="rebuild even if the cache has the tar")
    ap.add_argument("--load", action="store_true",
                    help="import the tars into containerd (images/load.sh) afterwards")
    ap.add_argument("--address", help="containerd socket for --load "
                    "(default: $CONTAINERD_ADDRESS or /run/containerd/containerd.sock)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per image")
    args = ap.parse_args(argv)
    names = args.names or list(IMAGES)
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        ap.error(f"unknown image {', '.join(unknown)}; known: {', '.join(IMAGES)}")
    results = []
    for name in names:
        r = build_image(name, force=args.force)
        results.append(r)
        if args.json:
            print(json.dumps({"name": r.name, "path": str(r.path), "tags": r.tags,
                              "size": r.size, "cached": r.cached, "seconds": round(r.seconds, 1)}))
        else:
            how = "cached" if r.cached else f"built in {r.seconds:.0f} s"
            print(f"{r.path}  {r.size / 2**20:6.0f} MiB  {' '.join(r.tags)}  ({how})")
        sys.stdout.flush()
    if args.load:
        load([r.path for r in results], args.address)
    return 0


if __name__ == "__main__":
    sys.exit(main())
