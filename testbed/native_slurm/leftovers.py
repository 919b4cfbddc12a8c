"""What an interrupted native Slurm cluster leaves, removed: processes in our network
namespaces, the namespaces, our links, mounts and work directories. Also what stops every
cluster of this process at exit (atexit, SIGTERM)."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import sys
import time
import weakref
from pathlib import Path

from testbed.native_slurm.hosts import PREFIX, WORK_BASE, _run
from testbed.processes import kill_pids, sweep_leftovers


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
    # The recorded anchors and daemons of clusters whose process is gone (the process
    # supervisor's record in each work directory), then whatever else runs in our
    # namespaces (a job step, a daemon's child).
    for work in sorted(work_base.glob(f"{PREFIX}*")) if work_base.exists() else []:
        removed += [f"pid {pid} recorded in {work}" for pid in sweep_leftovers(work, "processes.json")]
    for ns in _our_netns():
        ino = _netns_inode(ns)
        if ino is not None:
            removed += [f"pid {pid} in netns {ns}" for pid in kill_pids(_pids_in_netns(ino), signal.SIGKILL)]
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


# Every cluster this process started and has not stopped.
live: "weakref.WeakSet" = weakref.WeakSet()


def stop_all() -> None:
    for c in list(live):
        try:
            c.stop()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            print(f"kubeslurm native Slurm cluster: stop failed: {e}", file=sys.stderr)


atexit.register(stop_all)


def install_sigterm_handler() -> None:
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
