"""The one process supervisor of the test bed: spawn, record, terminate, sweep leftovers.

The local cluster, the control plane and the native Slurm cluster all start daemons
that must never outlive the run that owns them, even a run killed half-way (Ctrl-C
twice, a CI timeout, SIGKILL). So every daemon is recorded, the moment it starts, in a
JSON file on disk (the record), and everything that stops daemons reads that file, not
the memory of the process that started them:

- `Supervisor.stop()` stops what a record names (latest first: clients before servers),
  from the process that started them or from any later one (`make cluster-down`);
- `sweep_leftovers(dir)` stops what the records in a folder name when the process that
  owned them is gone (a killed test session), and removes those records.

A PID is only signalled while its command line still holds the marker recorded with it,
because PIDs get reused. Daemons run in sessions of their own, so a signal reaches their
whole process group (nsenter, unshare and sh wrappers and what they exec).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence


class SpawnError(RuntimeError):
    pass


@dataclass
class Process:
    """One recorded daemon. marker: a string its command line holds (see module doc);
    node: the machine it belongs to, for daemons killed together (a node's power cut)."""

    name: str
    pid: int
    marker: str
    node: str | None = None
    log: str | None = None


class Supervisor:
    """Daemons recorded in `record` (a JSON file: owner_pid, procs, and the caller's own keys).

    die_with_parent: the kernel SIGKILLs the daemons when the process that spawned them
    dies (tests); off for daemons that must outlive it (`make cluster-up`).
    """

    def __init__(self, record: Path | str, *, die_with_parent: bool = False):
        self.record = Path(record)
        self.die_with_parent = die_with_parent
        # Popen objects of what this process spawned: waited for, so no zombie stays.
        self._popens: dict[int, subprocess.Popen] = {}

    # -- the record --------------------------------------------------------------

    def load(self) -> dict:
        try:
            return json.loads(self.record.read_text())
        except (OSError, ValueError):
            return {}

    def save(self, data: dict) -> None:
        self.record.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.record.with_name(f".{self.record.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.record)

    def update(self, **keys) -> dict:
        """Sets the caller's own keys in the record (kept beside the processes)."""
        data = self.load()
        data.update(keys)
        self.save(data)
        return data

    def processes(self) -> list[Process]:
        return [Process(**p) for p in self.load().get("procs", [])]

    def add(self, process: Process) -> None:
        data = self.load()
        data.setdefault("owner_pid", os.getpid())
        data.setdefault("procs", []).append(asdict(process))
        self.save(data)

    # -- starting ----------------------------------------------------------------

    def spawn(self, name: str, argv: Sequence[str], *, marker: str, log: Path | None = None,
              node: str | None = None, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
              check_started: float = 0.0) -> subprocess.Popen:
        """Starts argv in a session of its own and records it before returning.

        log: stdout and stderr are appended there; None: both are pipes (text), for a
        daemon that reports readiness on stdout. check_started: seconds after which a
        daemon that already exited is an error naming its log.
        """
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = log.open("ab")
        else:
            out = None
        try:
            popen = subprocess.Popen(
                [str(a) for a in argv], stdin=subprocess.DEVNULL,
                stdout=out if out else subprocess.PIPE,
                stderr=subprocess.STDOUT if out else subprocess.PIPE,
                text=out is None, start_new_session=True, cwd=cwd, env=env,
                preexec_fn=_die_with_parent if self.die_with_parent else None)
        finally:
            if out:
                out.close()
        self._popens[popen.pid] = popen
        self.add(Process(name, popen.pid, marker, node, str(log) if log else None))
        if check_started:
            time.sleep(check_started)
            if popen.poll() is not None:
                raise SpawnError(f"{name} exited at once with code {popen.returncode}; see {log}:\n"
                                 f"{tail(log) if log else ''}")
        return popen

    # -- stopping ----------------------------------------------------------------

    def alive(self, process: Process) -> bool:
        return alive_with(process.pid, process.marker)

    def stop(self, only: Iterable[str] | None = None, *, node: str | None = None,
             grace: float = 15.0, forget: bool = True) -> None:
        """SIGTERM to the recorded daemons (latest first; only those named, or of one node),
        SIGKILL to those still running after `grace` seconds. forget: drop them from the
        record (with the record file itself once it names none)."""
        only = set(only) if only is not None else None
        chosen = [p for p in reversed(self.processes())
                  if (only is None or p.name in only) and (node is None or p.node == node)]
        signal_all(chosen, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in chosen:
            while alive_with(p.pid, p.marker) and time.monotonic() < deadline:
                self._reap(p.pid)
                time.sleep(0.1)
        signal_all(chosen, signal.SIGKILL)
        for p in chosen:
            self._reap(p.pid, wait=True)
        if forget:
            self._forget({p.pid for p in chosen})

    def kill(self, *, node: str) -> None:
        """SIGKILL at once to every daemon of `node` (a machine losing power); they stay
        recorded, so the record still says what the node ran."""
        chosen = [p for p in self.processes() if p.node == node]
        signal_all(chosen, signal.SIGKILL)
        for p in chosen:
            self._reap(p.pid, wait=True)

    def _forget(self, pids: set[int]) -> None:
        data = self.load()
        if not data:
            return
        data["procs"] = [p for p in data.get("procs", []) if p["pid"] not in pids]
        self.save(data)

    def _reap(self, pid: int, wait: bool = False) -> None:
        popen = self._popens.get(pid)
        if popen is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(5 if wait else 0)
        if popen.returncode is not None:
            self._popens.pop(pid, None)


def sweep_leftovers(record_dir: Path | str, pattern: str = "*.json") -> list[int]:
    """Stops the daemons of every record in record_dir whose owner process is gone (SIGKILL),
    and removes those records; records of a live owner (another session) stay.
    Returns the PIDs killed."""
    killed = []
    for record in sorted(Path(record_dir).glob(pattern)):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            record.unlink(missing_ok=True)
            continue
        if pid_exists(data.get("owner_pid", -1)):
            continue
        procs = [Process(**p) for p in reversed(data.get("procs", []))]
        killed += [p.pid for p in procs if alive_with(p.pid, p.marker)]
        signal_all(procs, signal.SIGKILL)
        record.unlink(missing_ok=True)
    return killed


# -- what /proc says ---------------------------------------------------------------


def signal_all(processes: Iterable[Process], sig: int) -> None:
    """sig to the process group of each daemon still running under its marker."""
    for p in processes:
        if alive_with(p.pid, p.marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)


def kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> list[int]:
    """sig to each PID (no process group); returns those that were there to signal."""
    signalled = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            signalled.append(pid)
    return signalled


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def argv_of(pid: int) -> list[str]:
    """A running process's command line, argument by argument (to start it again the same way)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def comm(pid: int) -> str:
    """The kernel's name of the process (cut at 15 characters)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def alive_with(pid: int, marker: str) -> bool:
    """pid runs (a zombie does not) and its command line still names marker."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (OSError, IndexError):
        return False
    return marker in cmdline(pid)


def pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pids_with(marker: str) -> list[int]:
    """Every process but this one whose command line holds marker."""
    me = os.getpid()
    return [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and int(e.name) != me and marker in cmdline(int(e.name))]


def rss(pid: int) -> int:
    """Resident memory in bytes (0 when gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def tail(path: Path | str | None, lines: int = 30) -> str:
    """The last lines of a log, or "" when there is none."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except (OSError, TypeError):
        return ""


def _die_with_parent() -> None:
    # Belt and braces for a test process killed with SIGKILL: the kernel sends the
    # daemons SIGKILL too. sweep_leftovers() covers what this misses.
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def log_tails(*logs: Path | str, lines: int = 30) -> str:
    """The last lines of each log, headed by its path: what an error shows."""
    return "\n".join(f"--- {log}:\n{tail(log, lines)}" for log in logs)
