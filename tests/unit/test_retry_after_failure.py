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
        return SimpleNamespace(**{"again_soon": False, "look_again_within": None, **fields})

    assert next_wait(None) == RESYNC_SECONDS  # the cluster is gone: the loop ends anyway
    assert next_wait(run()) == RESYNC_SECONDS
    assert next_wait(run(again_soon=True, look_again_within=5.0)) == AGAIN_SOON_SECONDS
    assert next_wait(run(look_again_within=5.0)) == 5.0  # running placeholders: a preemption is noticed soon
    assert next_wait(run(look_again_within=RESYNC_SECONDS * 10)) == RESYNC_SECONDS
