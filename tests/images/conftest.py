"""Fixtures of the image tier (pytest -m images): the image tars built by
images/build.py (cached by content; the first run takes about 5 minutes), their
layers unpacked into temporary roots, and a way to run a command in such a root
in private mount/PID (and optionally network/UTS) namespaces, or in a named network
namespace that a test made (`ip netns add`), shared by daemons in different roots.

Needs root (debootstrap, chroot, namespaces). Everything a test starts lives in
its own PID namespace held by one `unshare` process, so killing that process
ends every daemon it started, and its mounts vanish with its mount namespace.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from testbed.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def load_builder():
    spec = importlib.util.spec_from_file_location("kubeslurm_images_build", REPO / "images/build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def builder():
    return load_builder()


@pytest.fixture(scope="session")
def images(builder, pytestconfig):
    """{name: Result} of images/build.py for every image it knows (slurm, mariadb, ldap, operator, fake-gpu)."""
    if os.geteuid() != 0:
        pytest.skip("the image tier needs root: debootstrap, overlayfs, chroot, namespaces")
    capman = pytestconfig.pluginmanager.getplugin("capturemanager")
    results = {}
    with capman.global_and_fixture_disabled():  # build progress on the terminal
        for name in builder.IMAGES:
            results[name] = builder.build_image(name)
            r = results[name]
            print(f"\n{name}: {r.path} {r.size / 2**20:.0f} MiB "
                  f"({'cached' if r.cached else 'built'} in {r.seconds:.1f} s)")
    return results


def layer_member(archive: Path) -> tuple[tarfile.TarFile, tarfile.TarInfo]:
    tar = tarfile.open(archive)
    manifest = __import__("json").load(tar.extractfile("manifest.json"))
    return tar, tar.getmember(manifest[0]["Layers"][0])


@pytest.fixture(scope="session")
def unpacked(images):
    """unpacked(name) -> Path: the image's layer extracted (as root, owners kept)."""
    base = Path(tempfile.mkdtemp(prefix="ksl-images-"))
    roots: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in roots:
            root = base / name
            root.mkdir()
            tar, member = layer_member(images[name].path)
            with tar:
                src = tar.extractfile(member)
                p = subprocess.Popen(["tar", "-x", "-p", "--numeric-owner", "-C", str(root), "-f", "-"],
                                     stdin=subprocess.PIPE)
                shutil.copyfileobj(src, p.stdin, 1 << 20)
                p.stdin.close()
                assert p.wait() == 0, f"unpacking the {name} layer failed"
            roots[name] = root
        return roots[name]

    yield get
    _remove_tree(base)


def _remove_tree(path: Path) -> None:
    # Mounts were made in private namespaces that are gone by now; refuse to
    # delete through one anyway.
    mounted = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
               if line.split()[1].startswith(str(path) + "/")]
    for m in sorted(mounted, reverse=True):
        subprocess.run(["umount", "-l", m], check=False)
    shutil.rmtree(path, ignore_errors=True)


# Runs with the host's /bin/sh in the new namespaces, before the chroot: a
# tmpfs /dev with the usual nodes, /proc; in a new network namespace, lo and
# 10.254.254.1 (on a veth) up.
_PREPARE = r"""
set -e
root=$1; shift
mount --make-rprivate /
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=755,size=16m tmpfs "$root/dev"
mknod -m 666 "$root/dev/null" c 1 3
mknod -m 666 "$root/dev/zero" c 1 5
mknod -m 666 "$root/dev/full" c 1 7
mknod -m 666 "$root/dev/random" c 1 8
mknod -m 666 "$root/dev/urandom" c 1 9
mknod -m 666 "$root/dev/tty" c 5 0
mkdir "$root/dev/shm" && mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
if [ -n "${KSL_HOSTNAME:-}" ]; then hostname "$KSL_HOSTNAME"; fi
if [ -n "${KSL_LO_UP:-}" ]; then
    ip link set lo up
    # getaddrinfo(AI_ADDRCONFIG), which Slurm uses, finds nothing while the only
    # address is on lo: give the namespace one more, on a veth pair that stays
    # inside it (this kernel has no dummy links).
    ip link add ksl-v0 type veth peer name ksl-v1
    ip addr add 10.254.254.1/24 dev ksl-v0
    ip link set ksl-v1 up
    ip link set ksl-v0 up
fi
exec chroot "$@"
"""


class RootProcess:
    """A command in ROOT (chroot) inside new mount + PID namespaces (+ net/UTS)."""

    def __init__(self, root: Path, argv: list[str], env: dict[str, str] | None = None,
                 userspec: str | None = None, new_net: bool = False, hostname: str | None = None,
                 log: Path | None = None, netns: str | None = None):
        ns = ["--mount", "--pid", "--fork", "--kill-child"]
        if new_net:
            ns.append("--net")
        if hostname:
            ns.append("--uts")
        chroot_args = ([f"--userspec={userspec}"] if userspec else []) + [str(root), "/usr/bin/env", "-i"]
        chroot_args += [f"{k}={v}" for k, v in {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LC_ALL": "C.UTF-8", **(env or {})}.items()]
        host_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                    "KSL_HOSTNAME": hostname or "", "KSL_LO_UP": "1" if new_net else ""}
        self.log = log
        out = open(log, "wb") if log else subprocess.PIPE
        # netns: join a named network namespace (`ip netns add`) first, so that
        # daemons in different roots reach each other on its addresses only.
        enter = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
        self.proc = subprocess.Popen(
            [*enter, "unshare", *ns, "sh", "-c", _PREPARE, "prepare", str(root), *chroot_args, *argv],
            env=host_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        if log:
            out.close()

    def wait(self, timeout: float) -> tuple[int, str]:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        text = out.decode(errors="replace") if out is not None else self.output()
        return self.proc.returncode, text

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def kill(self) -> None:
        # unshare --kill-child: SIGKILL to unshare kills its child, the PID
        # namespace's init, and with it every process of the namespace.
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def namespace_pids(self, comm: str) -> list[int]:
        """Host PIDs of the processes named COMM that run chrooted in this root."""
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if (d / "comm").read_text().strip() == comm and \
                        os.readlink(d / "root") == str(self.root_path):
                    out.append(int(d.name))
            except OSError:
                continue
        return out

    @property
    def root_path(self) -> Path:
        return Path(self.proc.args[self.proc.args.index("prepare") + 1])


def run_in_root(root: Path, argv: list[str], timeout: float = 60, **kw) -> tuple[int, str]:
    rp = RootProcess(root, argv, **kw)
    try:
        return rp.wait(timeout)
    finally:
        rp.kill()


@pytest.fixture
def root_processes():
    """Factory of RootProcess objects, all killed after the test (failed or not)."""
    started: list[RootProcess] = []

    def start(*args, **kw) -> RootProcess:
        rp = RootProcess(*args, **kw)
        started.append(rp)
        return rp

    yield start
    for rp in started:
        rp.kill()


# Images' daemons start in well under a second: poll often.
wait_for = functools.partial(wait_for, interval=0.3)


# ---------------------------------------------------------------- containerd


class PrivateContainerd:
    """containerd with its own root, state, socket and config under a temp dir."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="ksl-ctd-", dir="/tmp"))
        self.address = str(self.dir / "c.sock")
        (self.dir / "config.toml").write_text(f"""version = 2
root = "{self.dir}/root"
state = "{self.dir}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{self.address}"
[ttrpc]
  address = "{self.address}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.dir}/opt"
""")
        self.log = open(self.dir / "containerd.log", "wb")
        self.proc = subprocess.Popen(["containerd", "--config", str(self.dir / "config.toml")],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: Path(self.address).is_socket() or self.proc.poll() is not None, 30,
                 "containerd's socket")
        assert self.proc.poll() is None, (self.dir / "containerd.log").read_text()

    def ctr(self, *args, timeout=300, check=True) -> subprocess.CompletedProcess:
        p = subprocess.run(["ctr", "--address", self.address, "-n", "k8s.io", *args],
                           capture_output=True, text=True, timeout=timeout)
        if check:
            assert p.returncode == 0, f"ctr {' '.join(args)}: {p.stdout}{p.stderr}"
        return p

    def stop(self):
        ids = self.ctr("containers", "ls", "-q", check=False).stdout.split()
        for cid in ids:
            self.ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False)
            self.ctr("tasks", "delete", "-f", cid, check=False)
            self.ctr("containers", "delete", cid, check=False)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        # shims we started (their command line names our socket)
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if self.address.encode() in (d / "cmdline").read_bytes():
                        os.kill(int(d.name), signal.SIGKILL)
                except OSError:
                    pass
        mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()
                  if ln.split()[1].startswith(str(self.dir) + "/")]
        for m in sorted(mounts, reverse=True):
            subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def containerd():
    missing = [b for b in ("containerd", "ctr", "runc", "containerd-shim-runc-v2") if not shutil.which(b)]
    if missing:
        pytest.skip(f"containerd is not installed ({', '.join(missing)} missing; apt-get install containerd)")
    c = PrivateContainerd()
    try:
        yield c
    finally:
        c.stop()
