"""slurmctld's container command with accounting: a first start waits for slurmdbd, a restart does not.

The script runs in sh as the container runs it, against a real TCP listener; slurmctld is a
stand-in on PATH that records its argv and the time it was started.
"""

import os
import socket
import subprocess
import time

from kubeslurm.render.controller.statefulset import (
    ACCOUNTING_WAIT_SECONDS, FIRST_START_WAITS_FOR_ACCOUNTING, STATE_SAVE_LOCATION,
)

from .late_listener import listening_after

STAND_IN = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
"""


def start_slurmctld(tmp_path, port: int, *, has_state: bool, script: str = FIRST_START_WAITS_FOR_ACCOUNTING) -> list[str]:
    bin_dir, state, calls = tmp_path / "bin", tmp_path / "state", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    if has_state:
        (state / "clustername").write_text("research\n")
    (bin_dir / "slurmctld").write_text(STAND_IN)
    (bin_dir / "slurmctld").chmod(0o755)
    script = script.replace(STATE_SAVE_LOCATION, str(state))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls)}
    subprocess.run(["/bin/sh", "-c", script, "slurmctld", "127.0.0.1", str(port), "-D", "-i"],
                   env=env, check=True, timeout=60)
    return calls.read_text().splitlines()


def test_first_start_waits_until_slurmdbd_listens(tmp_path):
    with listening_after(1.5) as (port, opened):
        calls = start_slurmctld(tmp_path, port, has_state=False)
        started = time.monotonic()
    assert calls == ["slurmctld -D -i"]
    assert 0 <= started - opened[0] < 1.5, started - opened[0]


def test_a_slurmctld_with_state_starts_at_once_without_slurmdbd(tmp_path):
    """A failover or restart: slurmctld knows its ClusterID and serves from its state files."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        t0 = time.monotonic()
        assert start_slurmctld(tmp_path, unused.getsockname()[1], has_state=True) == ["slurmctld -D -i"]
    assert time.monotonic() - t0 < 1


def test_a_first_start_goes_on_after_the_wait_bound(tmp_path):
    """slurmdbd never answers: slurmctld starts all the same after the bound (1 s here), to retry on its own."""
    script = FIRST_START_WAITS_FOR_ACCOUNTING.replace(f"-ge {ACCOUNTING_WAIT_SECONDS * 5}", "-ge 5")
    assert script != FIRST_START_WAITS_FOR_ACCOUNTING
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        t0 = time.monotonic()
        assert start_slurmctld(tmp_path, unused.getsockname()[1], has_state=False, script=script) == ["slurmctld -D -i"]
    assert 1 <= time.monotonic() - t0 < 10
