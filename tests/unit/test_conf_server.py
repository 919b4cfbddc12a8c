"""The configless clients' start (render/conf_server.py), run by sh as a container runs it."""

import ast
import os
import socket
import subprocess
import sys
import threading
import time

from kubeslurm.render.conf_server import CONTROLLER_WAIT_SECONDS, WAIT_FOR_CONTROLLER, once_slurmctld_listens

# A stand-in daemon: records its argv (argv[0] included: sackd re-executes it) and its PID.
STAND_IN = f"""#!{sys.executable}
import os, sys
with open(os.environ["CALLS"], "a") as calls:
    calls.write(repr([sys.argv[0], *sys.argv[1:], os.getpid()]) + "\\n")
"""


def start(tmp_path, conf_server: str, command: list[str] | None = None) -> tuple[list, float, int]:
    """(the stand-in's argv and PID, seconds until it ran, the PID of the shell that started it)."""
    daemon = tmp_path / "sackd"
    daemon.write_text(STAND_IN)
    daemon.chmod(0o755)
    calls = tmp_path / "calls"
    command = command or once_slurmctld_listens(str(daemon), ["-D", "--conf-server", conf_server])
    t0 = time.monotonic()
    shell = subprocess.Popen(command, env={**os.environ, "CALLS": str(calls)})
    assert shell.wait(timeout=60) == 0
    return ast.literal_eval(calls.read_text()), time.monotonic() - t0, shell.pid


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def test_the_daemon_replaces_the_shell_with_its_absolute_path_as_argv0(tmp_path):
    """exec: the daemon is the container's PID 1, and sackd finds itself again on reconfigure."""
    with listener() as controller:
        address = f"127.0.0.1:{controller.getsockname()[1]}"
        (argv0, *args, pid), seconds, shell_pid = start(tmp_path, address)
    assert argv0 == str(tmp_path / "sackd") and args == ["-D", "--conf-server", address]
    assert pid == shell_pid
    assert seconds < 5


def test_the_daemon_starts_within_a_poll_of_slurmctld_listening(tmp_path):
    """slurmctld listens 1.5 s after the container started: the daemon starts then, not at the
    daemon's own retry 10 s later. The second --conf-server address (the backup) counts too."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed; the listener takes it later
    controller = socket.socket()

    def listen_later():
        time.sleep(1.5)
        controller.bind(("127.0.0.1", port))
        controller.listen(8)

    later = threading.Thread(target=listen_later)
    later.start()
    try:
        (argv0, *args, _), seconds, _ = start(tmp_path, f"127.0.0.1:1,127.0.0.1:{port}")
    finally:
        later.join()
        controller.close()
    assert args == ["-D", "--conf-server", f"127.0.0.1:1,127.0.0.1:{port}"]
    assert 1.5 <= seconds < 5


def test_the_daemon_starts_anyway_after_the_wait(tmp_path):
    """Nobody listens: after CONTROLLER_WAIT_SECONDS (2 here) the daemon starts, to retry on its own."""
    daemon = str(tmp_path / "sackd")
    command = once_slurmctld_listens(daemon, ["-D", "--conf-server", "127.0.0.1:1"])
    short = WAIT_FOR_CONTROLLER.replace(f"-ge {CONTROLLER_WAIT_SECONDS * 5}", "-ge 10")  # tries of 0.2 s
    assert short != WAIT_FOR_CONTROLLER
    command[2] = command[2].replace(WAIT_FOR_CONTROLLER, short)
    (argv0, *args, _), seconds, _ = start(tmp_path, "127.0.0.1:1", command)
    assert args == ["-D", "--conf-server", "127.0.0.1:1"]
    assert 2 <= seconds < 10
