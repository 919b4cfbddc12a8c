"""Real Slurm daemons in network namespaces, for the real-Slurm test tier.

A `NativeSlurmCluster` runs slurmctld, slurmd (dynamic, configless), slurmdbd,
MariaDB and optionally sackd from a cached Debian trixie root filesystem (the same
package lists as the images, see images/build-rootfs.sh). Every "host" gets:

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
directory, and `cleanup_leftovers()` removes those left by an interrupted run.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

PREFIX = "ksl-"
BRIDGE = PREFIX + "br0"
# /24, addresses exist only inside our namespaces. Not 10.250.0.0/24: the local
# Kubernetes cluster (e2e/cluster) uses it for its nodes and MASQUERADEs it, and with
# br_netfilter loaded that rule also rewrites the traffic bridged over ksl-br0.
SUBNET = "10.253.0"
FIRST_HOST_OCTET = 10
REPO = Path(__file__).resolve().parents[2]
PACKAGE_FILES = [REPO / "images/slurm/packages.txt", REPO / "images/mariadb/packages.txt"]
BUILD_SCRIPT = REPO / "images/build-rootfs.sh"
ROOTFS_NAME = "slurm-test"
WORK_BASE = Path(os.environ.get("KUBESLURM_WORK", "/tmp/ksl-work"))
SLURM_UID = 64030  # Debian's fixed uid of the `slurm` user (base-passwd)
MYSQL_DATADIR = "/var/lib/kubeslurm-mysql"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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


class HarnessError(RuntimeError):
    pass


def _run(cmd: Sequence[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    p = subprocess.run(list(cmd), **kw)
    if check and p.returncode != 0:
        raise HarnessError(f"{shlex.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def build_rootfs() -> Path:
    """Build or reuse the cached test root filesystem; returns its path."""
    p = _run(["bash", str(BUILD_SCRIPT), ROOTFS_NAME, *map(str, PACKAGE_FILES)],
             check=False, stderr=None)  # build progress goes to our stderr
    if p.returncode != 0:
        raise HarnessError(f"{BUILD_SCRIPT} failed ({p.returncode}); see its output above")
    return Path(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- cleanup

def _netns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def _pids_in_netns(inode: int) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}/ns/net").st_ino == inode:
                pids.append(int(d))
        except OSError:
            pass
    return pids


def _our_netns() -> list[str]:
    try:
        return sorted(n for n in os.listdir("/run/netns") if n.startswith(PREFIX))
    except FileNotFoundError:
        return []


def cleanup_leftovers(work_base: Path = WORK_BASE) -> list[str]:
    """Remove everything named with our prefix: processes living in our network
    namespaces, the namespaces, our links, mounts and work directories.
    Returns what was removed (for logging)."""
    removed = []
    for ns in _our_netns():
        ino = _netns_inode(ns)
        if ino is not None:
            for pid in _pids_in_netns(ino):
                try:
                    os.kill(pid, signal.SIGKILL)
                    removed.append(f"pid {pid} in netns {ns}")
                except ProcessLookupError:
                    pass
    # Give the kernel a moment to tear the PID namespaces down.
    deadline = time.monotonic() + 10
    for ns in _our_netns():
        ino = _netns_inode(ns)
        while ino is not None and _pids_in_netns(ino) and time.monotonic() < deadline:
            time.sleep(0.1)
        _run(["ip", "netns", "delete", ns], check=False)
        removed.append(f"netns {ns}")
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    for m in re.finditer(r"^\d+: ([^:@]+)[:@]", links, re.M):
        if m.group(1).startswith(PREFIX):
            _run(["ip", "link", "delete", m.group(1)], check=False)
            removed.append(f"link {m.group(1)}")
    if work_base.exists():
        base = str(work_base.resolve()) + "/"
        mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
        for mp in sorted((m for m in mounts if m.startswith(base)), reverse=True):
            _run(["umount", "-l", mp], check=False)
            removed.append(f"mount {mp}")
        for d in work_base.iterdir():
            if d.name.startswith(PREFIX):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(f"dir {d}")
    return removed


_live: "weakref.WeakSet[NativeSlurmCluster]" = weakref.WeakSet()


def _stop_all() -> None:
    for c in list(_live):
        try:
            c.stop()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            print(f"kubeslurm harness: stop failed: {e}", file=sys.stderr)


atexit.register(_stop_all)


def _install_sigterm_handler() -> None:
    # Turn SIGTERM into KeyboardInterrupt: pytest then ends the session and runs
    # every finalizer (a SystemExit would only fail the current test), and a
    # plain script unwinds through `with`/finally blocks and atexit.
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        def _on_term(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")
        try:
            signal.signal(signal.SIGTERM, _on_term)
        except ValueError:  # not the main thread
            pass


# ---------------------------------------------------------------- config parsing

def conf_value(text: str, key: str) -> str | None:
    """First value of KEY=VALUE in a slurm-style config (case-insensitive key)."""
    m = re.search(rf"^\s*{key}\s*=\s*(\S+)", text, re.M | re.I)
    return m.group(1) if m else None


def slurmctld_host(slurm_conf: str) -> str:
    v = conf_value(slurm_conf, "SlurmctldHost") or conf_value(slurm_conf, "ControlMachine")
    if not v:
        raise HarnessError("slurm.conf has no SlurmctldHost= line")
    return v.split("(", 1)[0]


# ---------------------------------------------------------------- the cluster

@dataclass
class NodeSpec:
    name: str
    conf: str = "CPUs=1 RealMemory=500"
    gpus: int = 0


@dataclass
class _Host:
    name: str
    ip: str
    index: int
    aliases: list[str] = field(default_factory=list)
    gpus: int = 0
    anchor: subprocess.Popen | None = None
    pid: int | None = None  # host PID of the anchor (PID 1 inside)
    dir: Path | None = None

    @property
    def netns(self) -> str:
        return PREFIX + self.name

    @property
    def root(self) -> Path:
        assert self.dir is not None
        return self.dir / "root"


@dataclass
class _Daemon:
    name: str
    host: str
    proc: subprocess.Popen
    log: Path


class NativeSlurmCluster:
    """A Slurm cluster of real daemons, one network namespace per host.

    configs: file name -> text. slurm.conf, gres.conf, cgroup.conf and optional
        topology.conf go to the controller's /etc/slurm; slurmdbd.conf (optional;
        enables accounting) goes to the slurmdbd host.
    auth_key: bytes of /etc/slurm/slurm.key (auth/slurm), on every host.
    nodes: dynamic nodes, each `slurmd -Z --conf-server CTLD --conf CONF` on its own host.
    aliases: extra names in /etc/hosts, keyed by role ("controller", "slurmdbd",
        "mariadb", "login") or by host name.
    users: Unix users created on every host with the same uid (name -> uid, or names).
    db_credentials: (user, password) created in MariaDB; default: StorageUser/StoragePass
        of slurmdbd.conf.
    login: also start a login host running sackd (configless) for client commands.
    hostnames: override the host name of a role ("slurmdbd", "mariadb").

    Hosts: the controller is named by slurm.conf's SlurmctldHost (its "(addr)" part,
    when a name, becomes an alias); slurmdbd runs on the host named by slurmdbd.conf's
    DbdHost, or when that is localhost by slurm.conf's AccountingStorageHost, else on
    the controller; MariaDB on the host named by StorageHost (the slurmdbd host if
    localhost). AccountingStorageHost and StorageHost become aliases of their hosts
    when they name no host.
    """

    def __init__(
        self,
        rootfs: Path | str,
        configs: Mapping[str, str],
        auth_key: bytes,
        nodes: Sequence[NodeSpec | Mapping],
        aliases: Mapping[str, Sequence[str]] | None = None,
        users: Mapping[str, int] | Sequence[str] = (),
        db_credentials: tuple[str, str] | None = None,
        login: bool = False,
        hostnames: Mapping[str, str] | None = None,
        work_base: Path = WORK_BASE,
        name: str = "cluster",
    ):
        if os.geteuid() != 0:
            raise HarnessError("NativeSlurmCluster needs root (namespaces, mounts)")
        self.rootfs = Path(rootfs)
        if not (self.rootfs / ".kubeslurm-rootfs-complete").exists():
            raise HarnessError(f"{self.rootfs} is not a complete rootfs; run build_rootfs()")
        if "slurm.conf" not in configs:
            raise HarnessError("configs must contain slurm.conf")
        self.configs = dict(configs)
        self.auth_key = auth_key
        self.nodes = [n if isinstance(n, NodeSpec) else NodeSpec(**n) for n in nodes]
        if isinstance(users, Mapping):
            self.users = dict(users)
        else:
            self.users = {u: 2000 + i for i, u in enumerate(users)}
        self.work = work_base / f"{PREFIX}{name}"
        self.work_base = work_base
        self.daemons: dict[str, _Daemon] = {}
        self.hosts: dict[str, _Host] = {}
        self._started = False

        slurm_conf = self.configs["slurm.conf"]
        self.controller = slurmctld_host(slurm_conf)
        self.cluster_name = conf_value(slurm_conf, "ClusterName") or "cluster"
        dbd_conf = self.configs.get("slurmdbd.conf")
        self.accounting = dbd_conf is not None
        self.dbd_host = self.db_host = None
        hostnames = dict(hostnames or {})
        local = ("localhost", "127.0.0.1", "::1")
        acct_host = conf_value(slurm_conf, "AccountingStorageHost")
        if dbd_conf is not None:
            # slurmdbd checks that DbdHost is its own hostname (or localhost); with
            # localhost, slurmd.conf's AccountingStorageHost (a Service name in
            # Kubernetes) is the best name for the host slurmdbd runs on.
            dbd = conf_value(dbd_conf, "DbdHost") or "localhost"
            self.dbd_host = hostnames.get("slurmdbd") or (
                dbd if dbd not in local else acct_host if acct_host not in (None, *local)
                else self.controller)
            st = conf_value(dbd_conf, "StorageHost") or "localhost"
            self.db_host = hostnames.get("mariadb") or (self.dbd_host if st in local else st)
            self.db_credentials = db_credentials or (
                conf_value(dbd_conf, "StorageUser") or "slurm",
                conf_value(dbd_conf, "StoragePass") or "")
        self.login_host = "login" if login else None

        roles = {"controller": self.controller, "slurmdbd": self.dbd_host,
                 "mariadb": self.db_host, "login": self.login_host}
        order = [self.controller, self.dbd_host, self.db_host, self.login_host] + [
            n.name for n in self.nodes]
        for hn in order:
            if hn and hn not in self.hosts:
                i = len(self.hosts)
                self.hosts[hn] = _Host(hn, f"{SUBNET}.{FIRST_HOST_OCTET + i}", i)
        for n in self.nodes:
            self.hosts[n.name].gpus = n.gpus
        for key, names in (aliases or {}).items():
            hn = roles.get(key) if key in roles else key
            if hn not in self.hosts:
                raise HarnessError(f"alias key {key!r} names no host of this cluster")
            self.hosts[hn].aliases.extend(names)
        # Names the configs use for a role that name no host become aliases.
        wanted = [(self.controller, self._ctld_addr(slurm_conf))]
        if self.accounting:
            wanted += [(self.dbd_host, acct_host),
                       (self.db_host, conf_value(dbd_conf, "StorageHost"))]
        for hn, name in wanted:
            if name and name not in local and name not in self._all_names() \
                    and not re.fullmatch(r"[\d.]+", name):
                self.hosts[hn].aliases.append(name)

    @staticmethod
    def _ctld_addr(slurm_conf: str) -> str | None:
        v = conf_value(slurm_conf, "SlurmctldHost") or ""
        m = re.search(r"\((.+)\)", v)
        return m.group(1) if m else None

    def _all_names(self) -> set[str]:
        return {n for h in self.hosts.values() for n in [h.name, *h.aliases]}

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 120) -> "NativeSlurmCluster":
        _install_sigterm_handler()
        cleanup_leftovers(self.work_base)
        _live.add(self)
        self._started = True
        t0 = time.monotonic()
        try:
            self._make_network()
            for h in self.hosts.values():
                self._start_host(h)
            self._check_network()
            self.timings = {"hosts": time.monotonic() - t0}
            if self.accounting:
                self._start_mariadb(timeout)
                self.timings["mariadb"] = time.monotonic() - t0
                self._start_slurmdbd(timeout)
                self.timings["slurmdbd"] = time.monotonic() - t0
            self._start_slurmctld(timeout)
            self.timings["slurmctld"] = time.monotonic() - t0
            if self.accounting:
                self._wait_cluster_registered(timeout)
                self.timings["cluster_registered"] = time.monotonic() - t0
            for n in self.nodes:
                self._start_slurmd(n)
            if self.login_host:
                # As the login pods run it (render/login_statefulset.py): -D keeps sackd
                # in the foreground (24.11 accepts it, its usage text omits it), and on
                # `scontrol reconfigure` it re-executes argv[0] in place with execve(),
                # which does not search PATH: hence the absolute path.
                self._start_daemon("sackd", self.login_host,
                                   ["/usr/sbin/sackd", "-D", "-v", "--conf-server", self.controller],
                                   user="slurm")
            if self.nodes:
                self.wait_nodes_idle(len(self.nodes), timeout)
                self.timings["nodes_idle"] = time.monotonic() - t0
            if self.login_host:
                self._wait(lambda: self.run(self.login_host, "sinfo -h", check=False).returncode == 0,
                           timeout, "sinfo on the login host (sackd)", ["sackd"])
                self.timings["login"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> "NativeSlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill every process of every host, drop namespaces, links and files."""
        if not self._started:
            return
        self._started = False
        for h in self.hosts.values():
            if h.pid:
                try:
                    os.kill(h.pid, signal.SIGKILL)  # PID 1: the kernel kills the rest
                except ProcessLookupError:
                    pass
        for h in self.hosts.values():
            if h.anchor:
                try:
                    h.anchor.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        for d in self.daemons.values():
            try:
                d.proc.wait(10)
            except subprocess.TimeoutExpired:
                d.proc.kill()
        cleanup_leftovers(self.work_base)
        _live.discard(self)

    def stop_host(self, host: str) -> None:
        """Kill every process of HOST (what a deleted pod looks like to Slurm: slurmd
        and its job steps vanish at once, without telling slurmctld). The network
        namespace and the files stay, so `start_node` can bring it back."""
        h = self.hosts[host]
        if h.pid:
            try:
                os.kill(h.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if h.anchor:
            h.anchor.wait(10)
        for d in self.daemons.values():
            if d.host == host:
                try:
                    d.proc.wait(10)
                except subprocess.TimeoutExpired:
                    d.proc.kill()
        h.pid = None
        h.anchor = None

    def start_node(self, name: str) -> None:
        """(Re)start the host of node NAME and its `slurmd -Z`, like a pod of the same
        name coming back; the overlay keeps what the previous slurmd left in its spool."""
        node = next((n for n in self.nodes if n.name == name), None)
        if node is None:
            raise HarnessError(f"{name} is not a node of this cluster")
        if self.hosts[name].pid:
            raise HarnessError(f"host {name} is still running; stop_host() it first")
        self._start_host(self.hosts[name])
        self._start_slurmd(node)

    # ------------------------------------------------------------ network and hosts

    def _make_network(self) -> None:
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "link", "set", BRIDGE, "up"])
        for h in self.hosts.values():
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

    def _check_network(self) -> None:
        # bash's /dev/tcp needs a listener; a refused connection still proves reachability.
        names = list(self.hosts)
        for hn in names[1:]:
            p = self.run(names[0], f"timeout 5 bash -c 'exec 3<>/dev/tcp/{hn}/9' 2>&1", check=False)
            if "refused" not in p.stdout:
                raise HarnessError(f"{names[0]} cannot reach {hn} over {BRIDGE}: {p.stdout.strip()}"
                                   " (bridge-nf iptables rules dropping bridged traffic?)")

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{h.ip} {' '.join([h.name, *h.aliases])}" for h in self.hosts.values()]
        return "\n".join(lines) + "\n"

    def _start_host(self, h: _Host) -> None:
        h.dir = self.work / h.name
        for d in ("root", "upper", "ovlwork"):
            (h.dir / d).mkdir(parents=True, exist_ok=True)
        self._prepare_upper(h)
        args = {"hostname": h.name, "root": str(h.root), "lower": str(self.rootfs),
                "upper": str(h.dir / "upper"), "work": str(h.dir / "ovlwork"), "gpus": h.gpus}
        anchor = self.work / "anchor.py"
        if not anchor.exists():
            anchor.write_text(_ANCHOR)
        h.anchor = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{h.netns}", "unshare", "--uts", "--mount",
             "--pid", "--fork", "--propagation", "private",
             sys.executable, str(anchor), json.dumps(args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = h.anchor.stdout.readline()
        if line.strip() != "ready":
            err = h.anchor.stderr.read() if h.anchor.poll() is not None else ""
            raise HarnessError(f"host {h.name} did not come up: {line!r} {err}")
        children = Path(f"/proc/{h.anchor.pid}/task/{h.anchor.pid}/children").read_text().split()
        h.pid = int(children[0])

    def _prepare_upper(self, h: _Host) -> None:
        """Write this host's own files into its overlay upper dir before mounting."""
        up = h.dir / "upper"
        etc = up / "etc"
        (etc / "slurm").mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(self._hosts_file())
        (etc / "hostname").write_text(h.name + "\n")
        (etc / "resolv.conf").write_text("# no DNS: names come from /etc/hosts\n")
        (etc / "mailname").write_text(h.name + "\n")
        passwd = (self.rootfs / "etc/passwd").read_text()
        group = (self.rootfs / "etc/group").read_text()
        for user, uid in self.users.items():
            passwd += f"{user}:x:{uid}:{uid}::/home/{user}:/bin/bash\n"
            group += f"{user}:x:{uid}:\n"
            home = up / "home" / user
            home.mkdir(parents=True, exist_ok=True)
            os.chown(home, uid, uid)
        (etc / "passwd").write_text(passwd)
        (etc / "group").write_text(group)
        key = etc / "slurm/slurm.key"
        key.write_bytes(self.auth_key)
        os.chown(key, SLURM_UID, SLURM_UID)
        key.chmod(0o600)
        if h.name == self.controller:
            for fname, text in self.configs.items():
                if fname == "slurmdbd.conf":
                    continue
                (etc / "slurm" / fname).write_text(text)
            save = conf_value(self.configs["slurm.conf"], "StateSaveLocation") or "/var/spool/slurmctld"
            self._mkdir_owned(up, save, SLURM_UID)
        if h.name == self.dbd_host:
            f = etc / "slurm/slurmdbd.conf"
            f.write_text(self.configs["slurmdbd.conf"])
            os.chown(f, SLURM_UID, SLURM_UID)
            f.chmod(0o600)
        spool = conf_value(self.configs["slurm.conf"], "SlurmdSpoolDir") or "/var/spool/slurmd"
        self._mkdir_owned(up, spool.replace("%n", h.name).replace("%h", h.name), 0)
        # What systemd's RuntimeDirectory= makes for the Debian units: each daemon
        # keeps its sack.socket there and, once it has dropped to SlurmUser,
        # cannot create the directory in /run itself ("_prepare_run_dir: failed
        # to create /run/slurmdbd" is fatal).
        for d in ("/run/slurm", "/run/slurmctld", "/run/slurmdbd", "/var/log/slurm",
                  "/var/spool/slurm"):
            self._mkdir_owned(up, d, SLURM_UID)

    @staticmethod
    def _mkdir_owned(upper: Path, path: str, uid: int) -> None:
        p = upper / path.lstrip("/")
        p.mkdir(parents=True, exist_ok=True)
        os.chown(p, uid, uid)

    # ------------------------------------------------------------ running things

    def _enter(self, host: str) -> list[str]:
        h = self.hosts[host]
        if not h.pid:
            raise HarnessError(f"host {host} is not running")
        return ["nsenter", "-t", str(h.pid), "-n", "-u", "-m", "-p", "--", "chroot", str(h.root)]

    def _env(self, user: str | None, env: Mapping[str, str] | None = None) -> list[str]:
        home = f"/home/{user}" if user and user != "root" else "/root"
        return ["/usr/bin/env", "-i", f"PATH={CHROOT_PATH}", f"HOME={home}",
                f"USER={user or 'root'}", "LC_ALL=C.UTF-8", "TERM=dumb",
                *(f"{k}={v}" for k, v in (env or {}).items())]

    def command(self, host: str, cmd: str | Sequence[str], user: str | None = None,
                env: Mapping[str, str] | None = None) -> list[str]:
        """argv that runs CMD (a shell string or argv) on HOST as USER (default root)."""
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if user and user != "root":
            home = f"/home/{user}"
            argv = ["/usr/bin/setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                    "/bin/bash", "-c", f"cd {home} 2>/dev/null; exec \"$@\"", "-", *argv]
        return [*self._enter(host), *self._env(user, env), *argv]

    def run(self, host: str, cmd: str | Sequence[str], user: str | None = None,
            timeout: float = 60, check: bool = True, input: str | None = None
            ) -> subprocess.CompletedProcess:
        """Run CMD inside HOST (its namespaces and root) and capture its output."""
        try:
            p = subprocess.run(self.command(host, cmd, user), capture_output=True, text=True,
                               timeout=timeout, input=input)
        except subprocess.TimeoutExpired as e:
            raise HarnessError(f"on {host}: {cmd!r} timed out after {timeout}s;"
                               f" output so far: {e.stdout!r} {e.stderr!r}") from None
        if check and p.returncode != 0:
            raise HarnessError(f"on {host} as {user or 'root'}: {cmd!r} exited {p.returncode}\n"
                               f"stdout: {p.stdout}\nstderr: {p.stderr}")
        return p

    def _start_daemon(self, name: str, host: str, argv: Sequence[str],
                      user: str | None = None, env: Mapping[str, str] | None = None) -> _Daemon:
        log = self.work / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            proc = subprocess.Popen(self.command(host, list(argv), user, env), stdout=f,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        d = self.daemons[name] = _Daemon(name, host, proc, log)
        return d

    def logs(self, daemon: str, lines: int | None = None) -> str:
        """Output of DAEMON ("slurmctld", "slurmdbd", "mariadb", "sackd" or a node
        name for its slurmd), plus the daemon's own log file when the config names one."""
        d = self.daemons.get(daemon)
        if d is None:
            return f"(no daemon {daemon!r}; known: {sorted(self.daemons)})"
        text = d.log.read_text(errors="replace") if d.log.exists() else ""
        key = {"slurmctld": "SlurmctldLogFile", "slurmdbd": "LogFile"}.get(daemon, "SlurmdLogFile")
        conf = self.configs.get("slurmdbd.conf" if daemon == "slurmdbd" else "slurm.conf", "")
        path = conf_value(conf, key) if daemon != "mariadb" else None
        if path and self.hosts[d.host].pid:
            path = path.replace("%n", d.host).replace("%h", d.host)
            p = self.run(d.host, ["cat", path], check=False)
            text += f"\n--- {path} ---\n" + p.stdout
        if lines:
            text = "\n".join(text.splitlines()[-lines:])
        return text

    def _wait(self, ok, timeout: float, what: str, daemons: Sequence[str] = ()) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for dn in daemons:
                d = self.daemons.get(dn)
                if d and d.proc.poll() is not None:
                    raise HarnessError(f"{dn} exited ({d.proc.returncode}) while waiting for"
                                       f" {what}; its log:\n{self.logs(dn, 60)}")
            if ok():
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {dn} ---\n{self.logs(dn, 40)}" for dn in daemons)
                raise HarnessError(f"timed out after {timeout}s waiting for {what}\n{tails}")
            time.sleep(0.5)

    def _port_open(self, from_host: str, to: str, port: int) -> bool:
        return self.run(from_host, f"timeout 2 bash -c 'exec 3<>/dev/tcp/{to}/{port}'",
                        check=False, timeout=10).returncode == 0

    # ------------------------------------------------------------ daemons

    def _start_mariadb(self, timeout: float) -> None:
        h = self.db_host
        # Initialise a fresh data directory the way the image does on an empty
        # volume, instead of reusing the one the package's postinst made.
        self.run(h, f"mkdir -p {MYSQL_DATADIR} /run/mysqld && chown mysql:mysql {MYSQL_DATADIR}"
                    " /run/mysqld && mariadb-install-db --user=mysql"
                    f" --datadir={MYSQL_DATADIR} --auth-root-authentication-method=socket"
                    " --skip-test-db > /tmp/mariadb-install.log 2>&1 ||"
                    " { cat /tmp/mariadb-install.log; exit 1; }", timeout=120)
        self._start_daemon("mariadb", h, [
            "mariadbd", "--user=mysql", f"--datadir={MYSQL_DATADIR}", "--bind-address=0.0.0.0",
            "--port=3306", "--socket=/run/mysqld/mysqld.sock", "--skip-name-resolve",
            "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M",
            "--innodb-flush-log-at-trx-commit=2", "--log-error=", "--skip-log-bin"])
        self._wait(lambda: self.run(h, "mariadb-admin --socket=/run/mysqld/mysqld.sock ping",
                                    check=False).returncode == 0,
                   timeout, "MariaDB to answer", ["mariadb"])
        user, pw = self.db_credentials
        db = conf_value(self.configs["slurmdbd.conf"], "StorageLoc") or "slurm_acct_db"
        q = lambda s: s.replace("\\", "\\\\").replace("'", "\\'")  # noqa: E731
        # The database must exist before slurmdbd's first start: when it does
        # not, slurmdbd 24.11 creates it and then reuses the MYSQL handle of the
        # failed connect, and with Debian trixie's libmariadb 3.4 every query on
        # that handle fails ("5027 Number of columns in result (=1) set execeeds
        # maxmimum allowed number of columns (=0)", fatal in
        # _check_mysql_concat_is_sane).
        sql = f"CREATE DATABASE IF NOT EXISTS `{db}`;" + "".join(
            f"CREATE USER IF NOT EXISTS '{q(user)}'@'{host}' IDENTIFIED BY '{q(pw)}';"
            f"GRANT ALL ON `{db}`.* TO '{q(user)}'@'{host}';" for host in ("%", "localhost"))
        self.run(h, ["mariadb", "--socket=/run/mysqld/mysqld.sock", "-e", sql + "FLUSH PRIVILEGES;"])

    def _start_slurmdbd(self, timeout: float) -> None:
        self._start_daemon("slurmdbd", self.dbd_host, ["slurmdbd", "-D", "-v"])
        port = int(conf_value(self.configs["slurmdbd.conf"], "DbdPort") or 6819)
        self._wait(lambda: self._port_open(self.dbd_host, self.dbd_host, port), timeout,
                   f"slurmdbd to listen on {self.dbd_host}:{port}", ["slurmdbd"])

    def _start_slurmctld(self, timeout: float) -> None:
        self._start_daemon("slurmctld", self.controller, ["slurmctld", "-D", "-v", "-i"])
        self._wait(lambda: "is UP" in self.run(self.controller, "scontrol ping",
                                                check=False, timeout=20).stdout,
                   timeout, "slurmctld to answer scontrol ping", ["slurmctld"])

    def _wait_cluster_registered(self, timeout: float) -> None:
        def ok():
            p = self.run(self.controller, "sacctmgr -n -P show cluster format=cluster",
                         check=False, timeout=20)
            return self.cluster_name in p.stdout.split()
        self._wait(ok, timeout, f"cluster {self.cluster_name} in slurmdbd (sacctmgr show cluster)",
                   ["slurmctld", "slurmdbd"])

    def _start_slurmd(self, n: NodeSpec) -> None:
        # As the slurmd pods run it (render/slurmd_statefulset.py): -N names the node
        # before slurmd has a config, so SlurmdSpoolDir's %n is the same when slurmd
        # re-executes itself on `scontrol reconfigure`. Without -N, 24.11 caches the
        # fetched configs in /var/spool/slurmd//conf-cache and the re-executed slurmd
        # waits forever for /var/spool/slurmd/<node>/conf-cache/slurm.conf.
        self._start_daemon(n.name, n.name, ["slurmd", "-D", "-v", "-Z", "-N", n.name,
                                            "--conf-server", self.controller, "--conf", n.conf])

    # ------------------------------------------------------------ queries for tests

    def node_states(self) -> dict[str, str]:
        p = self.run(self.controller, "sinfo -h -N -o '%N %T'", check=False, timeout=20)
        return dict(line.split(None, 1) for line in p.stdout.splitlines() if line.strip())

    def wait_nodes_idle(self, n: int, timeout: float = 60) -> dict[str, str]:
        """Wait until at least N nodes are idle; returns the node states."""
        states: dict[str, str] = {}

        def ok():
            nonlocal states
            states = self.node_states()
            return sum(1 for s in states.values() if s == "idle") >= n
        self._wait(ok, timeout, f"{n} idle nodes (last seen: {states})",
                   ["slurmctld", *[x.name for x in self.nodes]])
        return states

    def wait_job(self, job_id: str | int, timeout: float = 60) -> str:
        """Wait until JOB_ID has left the queue; returns its final state from sacct
        (or scontrol when there is no accounting)."""
        def gone():
            p = self.run(self.controller, f"squeue -h -j {job_id} -o %T", check=False)
            return p.returncode == 0 and not p.stdout.strip() or "Invalid job id" in p.stderr
        self._wait(gone, timeout, f"job {job_id} to finish", ["slurmctld"])
        p = self.run(self.controller, f"scontrol show job {job_id}", check=False)
        m = re.search(r"JobState=(\S+)", p.stdout)
        return m.group(1) if m else "UNKNOWN"
