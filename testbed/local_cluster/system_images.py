"""The few container images the local cluster itself needs, built without a
Docker engine and without a registry (none is reachable here):

  kubeslurm.local/pause:1.0       the pod sandbox (containerd's sandbox_image),
                                  pause.c beside this file compiled with gcc -static
  kubeslurm.local/busybox:1.0     Debian's busybox-static, for tests and debugging
  kubeslurm.local/coredns:1.11.1  CoreDNS built from the Go module proxy

Each is a docker-archive tar (what `docker save` writes: manifest.json, the image
config and one layer.tar; written by images/build.py's writer, as every image of the
project is) that `ctr -n k8s.io images import` loads into a node's containerd. Tars
are cached in ${KUBESLURM_CACHE}/cluster/images under a name holding the hash of their
content, so a warm build only checks files.
Pods must not pull them: their tags are not `latest`, so the default
imagePullPolicy (IfNotPresent) uses the imported copy.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from images import build

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("KUBESLURM_CACHE", Path.home() / ".cache" / "kubeslurm"))

PAUSE_IMAGE = "kubeslurm.local/pause:1.0"
BUSYBOX_IMAGE = "kubeslurm.local/busybox:1.0"
COREDNS_VERSION = "v1.11.1"  # what Kubernetes 1.30 ships (cmd/kubeadm constants)
COREDNS_IMAGE = f"kubeslurm.local/coredns:{COREDNS_VERSION.lstrip('v')}"
CRICTL_VERSION = "v1.34.0"  # the module proxy serves v1.34.0 and v1.37.0 of cri-tools

PATH_ENV = f"PATH={build.CHROOT_PATH}"


class ImageBuildError(RuntimeError):
    pass


@dataclass
class Entry:
    """One file system entry of a layer."""

    path: str  # inside the image, without the leading /
    kind: str = "file"  # file | dir | symlink
    data: bytes = b""
    mode: int = 0o644
    target: str = ""  # for symlinks


@dataclass
class Image:
    tag: str
    entries: list[Entry]
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: [PATH_ENV])
    user: str = ""


def layer_tar(entries: list[Entry]) -> bytes:
    """A reproducible layer: sorted, owned by root, mtime 0; parent dirs added."""
    dirs = {Path(e.path).parent.as_posix() for e in entries}
    all_dirs = set()
    for d in dirs:
        p = Path(d)
        while p.as_posix() not in (".", ""):
            all_dirs.add(p.as_posix())
            p = p.parent
    explicit = {e.path: e for e in entries}
    for d in all_dirs:
        explicit.setdefault(d, Entry(d, "dir", mode=0o755))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(explicit):
            e = explicit[path]
            info = tarfile.TarInfo(e.path)
            info.mtime = 0
            info.mode = e.mode
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = e.target
                tar.addfile(info)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def write_docker_archive(image: Image, out: Path) -> Path:
    """Writes `image` as a reproducible docker-archive tar to out (atomically)."""
    layer = layer_tar(image.entries)
    diff_id = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": image.entrypoint or None,
            "Cmd": image.cmd or None,
            "Env": image.env,
            "User": image.user,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": "1970-01-01T00:00:00Z",
                     "created_by": "kubeslurm testbed/local_cluster/system_images.py"}],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    build.write_docker_archive(tmp, layer, diff_id, config, [image.tag], mtime=0)
    tmp.replace(out)
    return out


def _cached(image: Image, cache_dir: Path) -> Path:
    """The image's tar in cache_dir, named after the hash of what goes in it."""
    h = hashlib.sha256(image.tag.encode())
    for e in sorted(image.entries, key=lambda e: e.path):
        h.update(f"{e.path}\0{e.kind}\0{e.mode}\0{e.target}\0".encode())
        h.update(hashlib.sha256(e.data).digest())
    h.update(json.dumps([image.entrypoint, image.cmd, image.env, image.user]).encode())
    name = image.tag.split("/")[-1].replace(":", "-")
    out = cache_dir / f"{name}-{h.hexdigest()[:16]}.tar"
    if not out.exists():
        write_docker_archive(image, out)
    return out


def _minimal_etc() -> list[Entry]:
    return [
        Entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
        Entry("etc/group", data=b"root:x:0:\nnogroup:x:65534:\n"),
        Entry("etc/nsswitch.conf", data=b"hosts: files dns\n"),
        Entry("tmp", "dir", mode=0o1777),
        Entry("root", "dir", mode=0o700),
    ]


# -- the images --------------------------------------------------------------


def pause_image(cache_dir: Path) -> Path:
    src = HERE / "pause.c"
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "pause"
        _run(["gcc", "-static", "-Os", "-s", "-o", binary, src], "compiling the pause binary (apt-get install gcc libc6-dev)")
        data = binary.read_bytes()
    # gcc output is reproducible for the same compiler and source, so the hash
    # (and the cached tar) stays the same across builds.
    image = Image(PAUSE_IMAGE, [Entry("pause", data=data, mode=0o755)], entrypoint=["/pause"], env=[])
    return _cached(image, cache_dir)


def busybox_image(cache_dir: Path) -> Path:
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        raise ImageBuildError("/bin/busybox is missing: apt-get install busybox-static")
    applets = _run([busybox, "--list-full"], "listing busybox applets").split()
    entries = [Entry("bin/busybox", data=busybox.read_bytes(), mode=0o755)]
    for applet in applets:
        if applet != "bin/busybox":
            entries.append(Entry(applet, "symlink", target="/bin/busybox", mode=0o777))
    entries += _minimal_etc()
    image = Image(BUSYBOX_IMAGE, entries, cmd=["/bin/sh"])
    return _cached(image, cache_dir)


def coredns_image(cache_dir: Path, tools_bin: Path) -> Path:
    binary = tools_bin / f"coredns-{COREDNS_VERSION}"
    entries = [Entry("coredns", data=binary.read_bytes(), mode=0o755)] + _minimal_etc()
    image = Image(COREDNS_IMAGE, entries, entrypoint=["/coredns"], env=[])
    return _cached(image, cache_dir)


def build_go_tools(tools_bin: Path) -> dict[str, Path]:
    """crictl and coredns at pinned versions from the Go module proxy (cached)."""
    wanted = {
        f"crictl-{CRICTL_VERSION}": f"sigs.k8s.io/cri-tools/cmd/crictl@{CRICTL_VERSION}",
        f"coredns-{COREDNS_VERSION}": f"github.com/coredns/coredns@{COREDNS_VERSION}",
    }
    go = shutil.which("go") or "/usr/local/go/bin/go"
    tools_bin.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, pkg in wanted.items():
        target = tools_bin / name
        out[name.split("-")[0]] = target
        if target.exists():
            continue
        with tempfile.TemporaryDirectory(dir=tools_bin) as gobin:
            env = dict(os.environ, GOBIN=gobin, CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-buildvcs=false")
            print(f"images: building {pkg} (a cold build takes minutes)", flush=True)
            _run([go, "install", "-trimpath", "-ldflags", "-s -w", pkg], f"go install {pkg}", env=env)
            built = Path(gobin) / pkg.split("@")[0].rsplit("/", 1)[-1]
            built.replace(target)
    return out


def build_all(cache: Path = CACHE) -> dict[str, Path]:
    """Builds (or finds) every image and tool; returns {name: path}."""
    tools_bin = cache / "cluster" / "tools"
    images_dir = cache / "cluster" / "images"
    tools = build_go_tools(tools_bin)
    return {
        "crictl": tools["crictl"],
        "pause": pause_image(images_dir),
        "busybox": busybox_image(images_dir),
        "coredns": coredns_image(images_dir, tools_bin),
    }


def _run(cmd: list, what: str, env: dict | None = None) -> str:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise ImageBuildError(f"{what} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout
