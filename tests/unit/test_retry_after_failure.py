"""How long a SlurmCluster's loop waits after a failed reconcile (reconcile/handlers.py)."""

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
