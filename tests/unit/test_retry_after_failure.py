"""How long a SlurmCluster's loop waits after a reconcile, failed or not (reconcile/handlers.py)."""

import pytest

from kubeslurm.reconcile.handlers import MAX_BACKOFF_SECONDS, UNWATCHED_RETRY_SECONDS, wait_after_failure


@pytest.mark.parametrize("backoff, step, expected", [
    # the error backoff doubles from 2 s, up to its cap
    (0.0, "Apply", (2.0, 2.0)),
    (2.0, "Apply", (4.0, 4.0)),
    (64.0, None, (128.0, 128.0)),
    (MAX_BACKOFF_SECONDS, "Apply", (MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS)),
    # a Secret, ConfigMap or claim a person must fix raises no event: looked at again soon,
    # while the backoff itself keeps growing for when the failure changes kind
    (0.0, "ReadDirectorySettings", (2.0, 2.0)),
    (64.0, "ReadDirectorySettings", (UNWATCHED_RETRY_SECONDS, 128.0)),
    (64.0, "EnsureSecrets", (UNWATCHED_RETRY_SECONDS, 128.0)),
    (MAX_BACKOFF_SECONDS, "CheckStorage", (UNWATCHED_RETRY_SECONDS, MAX_BACKOFF_SECONDS)),
])
def test_wait_after_failure(backoff, step, expected):
    assert wait_after_failure(backoff, step) == expected


def test_wait_after_success():
    from types import SimpleNamespace

    from kubeslurm.reconcile.handlers import AGAIN_SOON_SECONDS, RESYNC_SECONDS, next_wait

    def run(**fields):
        return SimpleNamespace(**{"again_soon": False, "look_again_within": None, "slurm": None, **fields})

    assert next_wait(None) == RESYNC_SECONDS  # the cluster is gone: the loop ends anyway
    assert next_wait(run()) == RESYNC_SECONDS
    assert next_wait(run(again_soon=True, look_again_within=5.0)) == AGAIN_SOON_SECONDS
    assert next_wait(run(look_again_within=5.0)) == 5.0  # running placeholders: a preemption is noticed soon
    assert next_wait(run(look_again_within=RESYNC_SECONDS * 10)) == RESYNC_SECONDS


def slurm_answering(argv, timeout=60):
    import subprocess

    return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.mark.parametrize("commands, soon", [
    # reads change nothing the status was built from
    (lambda slurm: (slurm.ping(), slurm.nodes(), slurm.jobs()), False),
    (lambda slurm: (slurm.drain([], "x"), slurm.resume([]), slurm.delete_nodes([]), slurm.down([], "x")), False),
    # each command that changes nodes: what this run read of them (and wrote in status) is old
    (lambda slurm: slurm.delete_nodes(["h100-9"]), True),  # a scale-down's last records: Ready waits for them
    (lambda slurm: slurm.resume(["h100-1"]), True),
    (lambda slurm: slurm.drain(["h100-1"], "scale-down"), True),
    (lambda slurm: slurm.down(["h100-1"], "its pod is gone"), True),
])
def test_a_run_that_changed_slurm_s_nodes_is_followed_by_another_soon(commands, soon):
    """No watch event follows a Slurm command, and the operator's own status write wakes
    nothing (change_filter.py): the loop itself comes back to report the result."""
    from types import SimpleNamespace

    from kubeslurm.reconcile.handlers import AGAIN_SOON_SECONDS, RESYNC_SECONDS, next_wait
    from kubeslurm.reconcile.slurm_control import SlurmControl

    slurm = SlurmControl(slurm_answering)
    commands(slurm)
    run = SimpleNamespace(again_soon=False, look_again_within=None, slurm=slurm)
    assert next_wait(run) == (AGAIN_SOON_SECONDS if soon else RESYNC_SECONDS)
