"""The daemons of a native Slurm cluster: how MariaDB, slurmdbd, slurmctld, slurmd and
sackd are started on their hosts (as the images' pods start them), awaited and read."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from testbed.native_slurm.hosts import NativeSlurmError
from testbed.native_slurm.slurm_conf import conf_value
from testbed.waiting import wait_for

if TYPE_CHECKING:
    from testbed.native_slurm.cluster import NodeSpec

MYSQL_DATADIR = "/var/lib/kubeslurm-mysql"


@dataclass
class Daemon:
    name: str
    host: str
    proc: subprocess.Popen
    log: Path


class SlurmDaemons:
    """The daemon half of NativeSlurmCluster (cluster.py), which provides hosts, configs,
    command(), run() and the process supervisor."""

    def _start_daemon(self, name: str, host: str, argv: Sequence[str],
                      user: str | None = None, env: Mapping[str, str] | None = None) -> Daemon:
        log = self.work / "logs" / f"{name}.log"
        proc = self.supervisor.spawn(name, self.command(host, list(argv), user, env),
                                     marker=str(self.hosts[host].root), log=log, node=host)
        d = self.daemons[name] = Daemon(name, host, proc, log)
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
        def exited() -> str | None:
            for dn in daemons:
                d = self.daemons.get(dn)
                if d and d.proc.poll() is not None:
                    return f"{dn} exited ({d.proc.returncode})"
            return None

        wait_for(ok, timeout, what, failed=exited, error=NativeSlurmError,
                 details=lambda: "\n".join(f"--- {dn} ---\n{self.logs(dn, 40)}" for dn in daemons))

    def _port_open(self, from_host: str, to: str, port: int) -> bool:
        return self.run(from_host, f"timeout 2 bash -c 'exec 3<>/dev/tcp/{to}/{port}'",
                        check=False, timeout=10).returncode == 0


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

    def _start_slurmd(self, n: NodeSpec, command: Sequence[str] = ("slurmd",)) -> None:
        # As the slurmd pods run it (render/slurmd/statefulset.py): -N names the node
        # before slurmd has a config, so SlurmdSpoolDir's %n is the same when slurmd
        # re-executes itself on `scontrol reconfigure`. Without -N, 24.11 caches the
        # fetched configs in /var/spool/slurmd//conf-cache and the re-executed slurmd
        # waits forever for /var/spool/slurmd/<node>/conf-cache/slurm.conf.
        self._start_daemon(n.name, n.name, [*command, "-D", "-v", "-Z", "-N", n.name,
                                            "--conf-server", self.controller, "--conf", n.conf])

    # ------------------------------------------------------------ queries for tests
