"""The hosts of a native Slurm cluster: one network namespace, UTS, PID and mount
namespace each, on a bridge of their own, over a cached Debian root file system.

Every host gets:

- its own network namespace ``ksl-<host>`` with a veth onto the bridge ``ksl-br0``
  (10.253.0.0/24; the host side of the bridge has no address, nothing is routed
  anywhere else),
- its own UTS namespace (hostname), PID namespace and mount namespace,
- a per-host overlayfs over the cached root, plus proc, sysfs, a tmpfs /dev with
  null/zero/random/urandom/tty/full and fake GPUs ``/dev/nvidiaN`` (c 195 N).

Each host is held by an "anchor": a small Python process that is PID 1 of the
host's PID namespace and owns its mount namespace. Killing the anchor makes the
kernel kill every process of that host and drop every mount it made, so stopping
never depends on finding daemons one by one. The only objects visible on the
machine are named with the prefix ``ksl-`` (netns, links) or live under the work
directory (leftovers.py removes those an interrupted run left).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from images.build import CHROOT_PATH
from testbed import REPO
from testbed.processes import Supervisor

PREFIX = "ksl-"
BRIDGE = PREFIX + "br0"
# /24, addresses exist only inside our namespaces. Not 10.250.0.0/24: the local
# Kubernetes cluster (testbed/local_cluster) uses it for its nodes and MASQUERADEs it, and with
# br_netfilter loaded that rule also rewrites the traffic bridged over ksl-br0.
SUBNET = "10.253.0"
FIRST_HOST_OCTET = 10
PACKAGE_FILES = [REPO / "images/slurm/packages.txt", REPO / "images/mariadb/packages.txt"]
BUILD_SCRIPT = REPO / "images/build-rootfs.sh"
ROOTFS_NAME = "slurm-test"
WORK_BASE = Path(os.environ.get("KUBESLURM_WORK", "/tmp/ksl-work"))
SLURM_UID = 64030  # Debian's fixed uid of the `slurm` user (base-passwd)

# PID 1 of every host. Runs with the host's Python *outside* the chroot but
# inside the new namespaces: sets the hostname, mounts the host's root, reports
# "ready", then reaps orphans (slurmstepd, daemon children) until killed.
_ANCHOR = r"""
import json, os, signal, socket, subprocess, sys, time
a = json.loads(sys.argv[1])
root = a["root"]
def sh(*cmd):
    subprocess.run(cmd, check=True)
socket.sethostname(a["hostname"])
sh("mount", "--make-rprivate", "/")
sh("mount", "-t", "overlay", "overlay", "-o",
   "lowerdir=%s,upperdir=%s,workdir=%s" % (a["lower"], a["upper"], a["work"]), root)
sh("mount", "-t", "proc", "proc", root + "/proc")
sh("mount", "-t", "sysfs", "sysfs", root + "/sys")
sh("mount", "-t", "tmpfs", "-o", "mode=755,size=16m", "tmpfs", root + "/dev")
for name, major, minor, mode in [("null", 1, 3, 0o666), ("zero", 1, 5, 0o666),
        ("full", 1, 7, 0o666), ("random", 1, 8, 0o666), ("urandom", 1, 9, 0o666),
        ("tty", 5, 0, 0o666)] + [("nvidia%d" % i, 195, i, 0o666) for i in range(a["gpus"])]:
    p = root + "/dev/" + name
    os.mknod(p, mode | 0o020000, os.makedev(major, minor))
    os.chmod(p, mode)
for d in ("pts", "shm"):
    os.mkdir(root + "/dev/" + d)
sh("mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts", root + "/dev/pts")
os.symlink("pts/ptmx", root + "/dev/ptmx")
sh("mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", root + "/dev/shm")
for i, n in enumerate(("stdin", "stdout", "stderr")):
    os.symlink("/proc/self/fd/%d" % i, root + "/dev/" + n)
os.symlink("/proc/self/fd", root + "/dev/fd")
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("ready", flush=True)
sys.stdout.close()
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.5)
"""



class NativeSlurmError(RuntimeError):
    pass


def _run(cmd: Sequence[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    p = subprocess.run(list(cmd), **kw)
    if check and p.returncode != 0:
        raise NativeSlurmError(f"{shlex.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def build_rootfs() -> Path:
    """Build or reuse the cached test root filesystem; returns its path."""
    p = _run(["bash", str(BUILD_SCRIPT), ROOTFS_NAME, *map(str, PACKAGE_FILES)],
             check=False, stderr=None)  # build progress goes to our stderr
    if p.returncode != 0:
        raise NativeSlurmError(f"{BUILD_SCRIPT} failed ({p.returncode}); see its output above")
    return Path(p.stdout.strip().splitlines()[-1])

@dataclass
class Host:
    name: str
    ip: str
    index: int
    aliases: list[str] = field(default_factory=list)
    gpus: int = 0
    pid: int | None = None  # host PID of the anchor (PID 1 inside)
    dir: Path | None = None

    @property
    def netns(self) -> str:
        return PREFIX + self.name

    @property
    def root(self) -> Path:
        assert self.dir is not None
        return self.dir / "root"

    def enter(self) -> list[str]:
        """The argv prefix that runs a command inside this host (its namespaces and root)."""
        if not self.pid:
            raise NativeSlurmError(f"host {self.name} is not running")
        return ["nsenter", "-t", str(self.pid), "-n", "-u", "-m", "-p", "--", "chroot", str(self.root)]


def clean_env(user: str | None, env: Mapping[str, str] | None = None) -> list[str]:
    """`env -i` with what a login gives USER (PATH, HOME, USER, a UTF-8 locale)."""
    home = f"/home/{user}" if user and user != "root" else "/root"
    return ["/usr/bin/env", "-i", f"PATH={CHROOT_PATH}", f"HOME={home}",
            f"USER={user or 'root'}", "LC_ALL=C.UTF-8", "TERM=dumb",
            *(f"{k}={v}" for k, v in (env or {}).items())]


def make_network(hosts: Sequence[Host]) -> None:
    """The bridge and a network namespace per host, with its veth on the bridge."""
    _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "link", "set", BRIDGE, "up"])
    for h in hosts:
        ns, veth, peer = h.netns, f"{PREFIX}v{h.index}", f"{PREFIX}p{h.index}"
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", veth, "master", BRIDGE, "up"])
        _run(["ip", "link", "set", peer, "netns", ns])
        ipn = ["ip", "-n", ns]
        _run([*ipn, "link", "set", peer, "name", "eth0"])
        _run([*ipn, "addr", "add", f"{h.ip}/24", "dev", "eth0"])
        _run([*ipn, "link", "set", "eth0", "up"])
        _run([*ipn, "link", "set", "lo", "up"])

def start_host(h: Host, rootfs: Path, work: Path, supervisor: Supervisor) -> None:
    """Starts the anchor of H (its files already in h.dir/upper) and waits until it is ready."""
    for d in ("root", "upper", "ovlwork"):
        (h.dir / d).mkdir(parents=True, exist_ok=True)
    args = {"hostname": h.name, "root": str(h.root), "lower": str(rootfs),
            "upper": str(h.dir / "upper"), "work": str(h.dir / "ovlwork"), "gpus": h.gpus}
    anchor = work / "anchor.py"
    if not anchor.exists():
        anchor.write_text(_ANCHOR)
    # The anchor's argument names the host's root: the marker of the anchor and of
    # every daemon entered into the host.
    popen = supervisor.spawn(
        f"host {h.name}",
        ["nsenter", f"--net=/run/netns/{h.netns}", "unshare", "--uts", "--mount",
         "--pid", "--fork", "--propagation", "private",
         sys.executable, str(anchor), json.dumps(args)],
        marker=str(h.root), node=h.name)
    line = popen.stdout.readline()
    if line.strip() != "ready":
        err = popen.stderr.read() if popen.poll() is not None else ""
        raise NativeSlurmError(f"host {h.name} did not come up: {line!r} {err}")
    children = Path(f"/proc/{popen.pid}/task/{popen.pid}/children").read_text().split()
    h.pid = int(children[0])


def mkdir_owned(upper: Path, path: str, uid: int) -> None:
    p = upper / path.lstrip("/")
    p.mkdir(parents=True, exist_ok=True)
    os.chown(p, uid, uid)
