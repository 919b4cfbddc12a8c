"""slurmdbd's container script (render/accounting/statefulset.py SLURMDBD_START), run in bash as
the container runs it, against real TCP listeners: it waits for the database, runs slurmdbd, passes
SIGTERM on, ends with slurmdbd's status, and stops a slurmdbd that never listens.

slurmdbd is a stand-in on PATH (a Python script) that records what happened to it and
listens on $SLURMDBD_PORT when told to (STAND_IN_LISTEN), or exits with STAND_IN_EXIT, or ignores
SIGTERM (STAND_IN_STUBBORN), like the first slurmdbd on a fresh database that never listens.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from kubeslurm.render.accounting.statefulset import SLURMDBD_START, STARTUP_SECONDS

from .late_listener import listening_after

STAND_IN = f"""#!{sys.executable}
import os, signal, socket, sys, time
log = open(os.environ["CALLS"], "a", buffering=1)
log.write(f"started {{time.monotonic()}} {{' '.join(sys.argv[1:])}}\\n")
if os.environ.get("STAND_IN_STUBBORN"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def stop(*_):
        log.write("SIGTERM\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
if "STAND_IN_EXIT" in os.environ:
    sys.exit(int(os.environ["STAND_IN_EXIT"]))
if os.environ.get("STAND_IN_LISTEN"):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(os.environ["SLURMDBD_PORT"])))
    listener.listen(8)
    log.write("listening\\n")
time.sleep(float(os.environ.get("STAND_IN_SECONDS", "60")))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp_path, database_port: int, script: str = SLURMDBD_START, **stand_in: str) -> tuple[subprocess.Popen, object]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "slurmdbd").write_text(STAND_IN)
    (bin_dir / "slurmdbd").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls),
           "DATABASE_HOST": "127.0.0.1", "DATABASE_PORT": str(database_port), "SLURMDBD_PORT": str(free_port()),
           **stand_in}
    proc = subprocess.Popen(["/bin/bash", "-c", script, "slurmdbd-start", "slurmdbd", "-D"], env=env,
                            stderr=subprocess.PIPE, text=True)
    return proc, calls


def lines(calls) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def wait_for_line(calls, prefix: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not any(line.startswith(prefix) for line in lines(calls)):
        assert time.monotonic() < deadline, (prefix, lines(calls))
        time.sleep(0.05)


def test_slurmdbd_starts_once_the_database_accepts_connections_and_its_status_is_the_containers(tmp_path):
    with listening_after(1.5) as (port, opened):
        proc, calls = start(tmp_path, port, STAND_IN_EXIT="3")
        assert proc.wait(timeout=30) == 3, proc.stderr.read()
    started = lines(calls)[0].split()
    assert started[0] == "started" and started[2:] == ["-D"]
    assert 0 <= float(started[1]) - opened[0] < 1.5
    assert "waiting for the accounting database 127.0.0.1:" in proc.stderr.read()


def test_sigterm_reaches_slurmdbd_and_the_script_ends_after_it(tmp_path):
    with listening_after(0) as (port, _):
        proc, calls = start(tmp_path, port, STAND_IN_LISTEN="1")
        wait_for_line(calls, "listening")
        time.sleep(0.5)  # past the wait for slurmdbd's port: the script waits for slurmdbd itself
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read()
    assert lines(calls)[-1] == "SIGTERM"


def test_sigterm_while_waiting_for_the_database_ends_the_wait(tmp_path):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        proc, calls = start(tmp_path, unused.getsockname()[1])
        time.sleep(1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
    assert time.monotonic() - t0 < 5
    assert lines(calls) == []


@pytest.mark.parametrize("stubborn", [True, False], ids=["ignores SIGTERM", "would stop"])
def test_a_slurmdbd_that_never_listens_is_killed_and_the_container_ends(tmp_path, stubborn):
    """The bound is STARTUP_SECONDS in the pod, 1 s here."""
    script = SLURMDBD_START.replace(f"-ge {STARTUP_SECONDS * 5}", "-ge 5")
    assert script != SLURMDBD_START
    with listening_after(0) as (port, _):
        stand_in = {"STAND_IN_STUBBORN": "1"} if stubborn else {}
        # Before the script starts: it counts its bound from slurmdbd's start, which a poll for
        # the stand-in's first line may see up to a poll later.
        t0 = time.monotonic()
        proc, calls = start(tmp_path, port, script, **stand_in)
        wait_for_line(calls, "started")
        assert proc.wait(timeout=30) == 1
    assert 1 <= time.monotonic() - t0 < 10
    assert "slurmdbd has not listened on port" in proc.stderr.read()
    pid_gone = subprocess.run(["pgrep", "-f", str(tmp_path / "bin" / "slurmdbd")], capture_output=True)
    assert pid_gone.returncode == 1, pid_gone.stdout


def test_a_slurmdbd_that_listens_is_left_running(tmp_path):
    script = SLURMDBD_START.replace(f"-ge {STARTUP_SECONDS * 5}", "-ge 5")
    with listening_after(0) as (port, _):
        proc, calls = start(tmp_path, port, script, STAND_IN_LISTEN="1", STAND_IN_SECONDS="3")
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert [line.split()[0] for line in lines(calls)] == ["started", "listening"]
