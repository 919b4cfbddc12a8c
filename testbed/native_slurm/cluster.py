"""NativeSlurmCluster: real Slurm daemons in network namespaces, no Kubernetes. The
real-Slurm test tier runs the operator's rendered configs and its SlurmControl on it, and
the benchmark compares kubeslurm with it (rendered.py builds one from a manifest).

It runs slurmctld, slurmd (dynamic, configless), slurmdbd, MariaDB and optionally sackd
from a cached Debian trixie root filesystem (the same package lists as the images, see
images/build-rootfs.sh), one host each (hosts.py says what a host is). The anchors and
daemons are recorded by the process supervisor (testbed/processes.py) in the work
directory; leftovers.py removes what an interrupted run left.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from kubeslurm.api.bridge import BRIDGE_EPILOG
from kubeslurm.api.node_health import HEALTH_CHECK_PROGRAM
from testbed import REPO
from testbed.native_slurm import leftovers
from testbed.native_slurm.daemons import Daemon, SlurmDaemons
from testbed.native_slurm.hosts import (
    BRIDGE,
    FIRST_HOST_OCTET,
    PREFIX,
    SLURM_UID,
    SUBNET,
    WORK_BASE,
    Host,
    NativeSlurmError,
    clean_env,
    make_network,
    mkdir_owned,
    start_host,
)
from testbed.native_slurm.slurm_conf import conf_value, slurmctld_host
from testbed.processes import Supervisor

HEALTH_CHECK_SOURCE = REPO / "images/slurm/health-check.sh"
BRIDGE_EPILOG_SOURCE = REPO / "images/slurm/bridge-epilog.sh"


@dataclass
class NodeSpec:
    name: str
    conf: str = "CPUs=1 RealMemory=500"
    gpus: int = 0


class NativeSlurmCluster(SlurmDaemons):
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
            raise NativeSlurmError("NativeSlurmCluster needs root (namespaces, mounts)")
        self.rootfs = Path(rootfs)
        if not (self.rootfs / ".kubeslurm-rootfs-complete").exists():
            raise NativeSlurmError(f"{self.rootfs} is not a complete rootfs; run build_rootfs()")
        if "slurm.conf" not in configs:
            raise NativeSlurmError("configs must contain slurm.conf")
        self.configs = dict(configs)
        self.auth_key = auth_key
        self.nodes = [n if isinstance(n, NodeSpec) else NodeSpec(**n) for n in nodes]
        if isinstance(users, Mapping):
            self.users = dict(users)
        else:
            self.users = {u: 2000 + i for i, u in enumerate(users)}
        self.work = work_base / f"{PREFIX}{name}"
        self.work_base = work_base
        self.daemons: dict[str, Daemon] = {}
        self.hosts: dict[str, Host] = {}
        self._started = False
        self.supervisor = Supervisor(self.work / "processes.json")

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
                self.hosts[hn] = Host(hn, f"{SUBNET}.{FIRST_HOST_OCTET + i}", i)
        for n in self.nodes:
            self.hosts[n.name].gpus = n.gpus
        for key, names in (aliases or {}).items():
            hn = roles.get(key) if key in roles else key
            if hn not in self.hosts:
                raise NativeSlurmError(f"alias key {key!r} names no host of this cluster")
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
        leftovers.install_sigterm_handler()
        leftovers.cleanup_leftovers(self.work_base)
        leftovers.live.add(self)
        self._started = True
        t0 = time.monotonic()
        try:
            make_network(list(self.hosts.values()))
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
                # As the login pods run it (render/login/statefulset.py): -D keeps sackd
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

    def stop(self, show_logs: bool = False) -> None:
        """Kill every process of every host, drop namespaces, links and files; with
        show_logs (a test failed), print each daemon's last 40 log lines first."""
        if not self._started:
            return
        if show_logs:
            for daemon in self.daemons:
                print(f"\n===== {daemon} (last 40 lines) =====\n{self.logs(daemon, 40)}")
        self._started = False
        for h in self.hosts.values():
            self._kill_host(h)
        self.supervisor.stop(grace=10)
        leftovers.cleanup_leftovers(self.work_base)
        leftovers.live.discard(self)

    def stop_host(self, host: str) -> None:
        """Kill every process of HOST (what a deleted pod looks like to Slurm: slurmd
        and its job steps vanish at once, without telling slurmctld). The network
        namespace and the files stay, so `start_node` can bring it back."""
        h = self.hosts[host]
        self._kill_host(h)
        self.supervisor.stop(node=host, grace=10)
        h.pid = None

    @staticmethod
    def _kill_host(h: Host) -> None:
        if h.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(h.pid, signal.SIGKILL)  # PID 1: the kernel kills the rest

    def start_node(self, name: str) -> None:
        """(Re)start the host of node NAME and its `slurmd -Z`, like a pod of the same
        name coming back; the overlay keeps what the previous slurmd left in its spool."""
        node = next((n for n in self.nodes if n.name == name), None)
        if node is None:
            raise NativeSlurmError(f"{name} is not a node of this cluster")
        if self.hosts[name].pid:
            raise NativeSlurmError(f"host {name} is still running; stop_host() it first")
        self._start_host(self.hosts[name])
        self._start_slurmd(node)

    def restart_slurmd(self, name: str, command: Sequence[str] = ("slurmd",)) -> None:
        """What a slurmd container that crashed looks like: slurmd and every job step of node
        NAME killed at once (SIGKILL), the host (the pod, its files and /run) kept, and slurmd
        started again through `command` (the container's command, e.g. a script that execs
        slurmd with the arguments that follow it)."""
        node = next((n for n in self.nodes if n.name == name), None)
        if node is None:
            raise NativeSlurmError(f"{name} is not a node of this cluster")
        # Inside the host's PID namespace: the supervisor's record is the nsenter wrapper.
        self.run(name, "pkill -KILL -x slurmd; pkill -KILL -x slurmstepd; true")
        self.supervisor.stop(only=[name], node=name, grace=5)  # reaps and forgets the wrapper, not the host
        self._start_slurmd(node, command)

    # ------------------------------------------------------------ network and hosts

    def _check_network(self) -> None:
        # bash's /dev/tcp needs a listener; a refused connection still proves reachability.
        names = list(self.hosts)
        for hn in names[1:]:
            p = self.run(names[0], f"timeout 5 bash -c 'exec 3<>/dev/tcp/{hn}/9' 2>&1", check=False)
            if "refused" not in p.stdout:
                raise NativeSlurmError(f"{names[0]} cannot reach {hn} over {BRIDGE}: {p.stdout.strip()}"
                                   " (bridge-nf iptables rules dropping bridged traffic?)")

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{h.ip} {' '.join([h.name, *h.aliases])}" for h in self.hosts.values()]
        return "\n".join(lines) + "\n"

    def _start_host(self, h: Host) -> None:
        h.dir = self.work / h.name
        (h.dir / "upper").mkdir(parents=True, exist_ok=True)
        self._prepare_upper(h)
        start_host(h, self.rootfs, self.work, self.supervisor)

    def _prepare_upper(self, h: Host) -> None:
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
            mkdir_owned(up, save, SLURM_UID)
        if h.name == self.dbd_host:
            f = etc / "slurm/slurmdbd.conf"
            f.write_text(self.configs["slurmdbd.conf"])
            os.chown(f, SLURM_UID, SLURM_UID)
            f.chmod(0o600)
        # What images/slurm/setup.sh installs beside the packages: the HealthCheckProgram and
        # the bridge's Epilog.
        for source, program in ((HEALTH_CHECK_SOURCE, HEALTH_CHECK_PROGRAM), (BRIDGE_EPILOG_SOURCE, BRIDGE_EPILOG)):
            installed = up / program.lstrip("/")
            installed.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, installed)
            installed.chmod(0o755)
        spool = conf_value(self.configs["slurm.conf"], "SlurmdSpoolDir") or "/var/spool/slurmd"
        mkdir_owned(up, spool.replace("%n", h.name).replace("%h", h.name), 0)
        # What systemd's RuntimeDirectory= makes for the Debian units: each daemon
        # keeps its sack.socket there and, once it has dropped to SlurmUser,
        # cannot create the directory in /run itself ("_prepare_run_dir: failed
        # to create /run/slurmdbd" is fatal).
        for d in ("/run/slurm", "/run/slurmctld", "/run/slurmdbd", "/var/log/slurm",
                  "/var/spool/slurm"):
            mkdir_owned(up, d, SLURM_UID)

    # ------------------------------------------------------------ running things

    def command(self, host: str, cmd: str | Sequence[str], user: str | None = None,
                env: Mapping[str, str] | None = None) -> list[str]:
        """argv that runs CMD (a shell string or argv) on HOST as USER (default root)."""
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if user and user != "root":
            home = f"/home/{user}"
            argv = ["/usr/bin/setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                    "/bin/bash", "-c", f"cd {home} 2>/dev/null; exec \"$@\"", "-", *argv]
        return [*self.hosts[host].enter(), *clean_env(user, env), *argv]

    def run(self, host: str, cmd: str | Sequence[str], user: str | None = None,
            timeout: float = 60, check: bool = True, input: str | None = None
            ) -> subprocess.CompletedProcess:
        """Run CMD inside HOST (its namespaces and root) and capture its output."""
        try:
            p = subprocess.run(self.command(host, cmd, user), capture_output=True, text=True,
                               timeout=timeout, input=input)
        except subprocess.TimeoutExpired as e:
            raise NativeSlurmError(f"on {host}: {cmd!r} timed out after {timeout}s;"
                               f" output so far: {e.stdout!r} {e.stderr!r}") from None
        if check and p.returncode != 0:
            raise NativeSlurmError(f"on {host} as {user or 'root'}: {cmd!r} exited {p.returncode}\n"
                               f"stdout: {p.stdout}\nstderr: {p.stderr}")
        return p

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
