"""When the operator says slurmctld's state volume is (nearly) full, what it says, and when it stops."""

import pytest

from kubeslurm.reconcile.state_volume import (
    MIB,
    STATE_VOLUME_FULL,
    STATE_VOLUME_NEARLY_FULL,
    STATE_VOLUME_RECOVERED,
    StateVolumeProblem,
    VolumeUsage,
    parse_df,
    reported_problem,
    state_volume_events,
    state_volume_problem,
)

CLAIM = "hpc/research-controller-state"
GIB = 1024 * MIB


@pytest.mark.parametrize(
    "text, usage",
    [
        # a tmpfs filled to the last block (the fault tier's bounded state volume)
        ("Filesystem     1024-blocks  Used Available Capacity Mounted on\n"
         "tmpfs                65536 65536         0     100% /var/spool/slurmctld\n", VolumeUsage(64 * MIB, 0)),
        # a device name with a space: the numbers are read from the right
        ("Filesystem 1024-blocks Used Available Capacity Mounted on\n"
         "my volume 1048576 1024 1047552 1% /var/spool/slurmctld\n", VolumeUsage(GIB, GIB - MIB)),
    ],
)
def test_df_output_becomes_size_and_free_bytes(text, usage):
    assert parse_df(text) == usage


@pytest.mark.parametrize("text", ["", "df: /var/spool/slurmctld: No such file or directory\n",
                                  "Filesystem 1024-blocks Used Available Capacity Mounted on\n",
                                  "Filesystem 1024-blocks Used Available Capacity Mounted on\ntmpfs x y z 1% /s\n"])
def test_df_output_that_is_not_one_row_of_numbers_is_refused(text):
    with pytest.raises(ValueError, match="unexpected df output"):
        parse_df(text)


@pytest.mark.parametrize(
    "usage, reason",
    [
        (VolumeUsage(GIB, GIB - 10 * MIB), None),  # 1% used
        (VolumeUsage(GIB, int(GIB * 0.11)), None),  # 89% used
        (VolumeUsage(GIB, int(GIB * 0.10)), STATE_VOLUME_NEARLY_FULL),  # 90% used
        (VolumeUsage(GIB, 11 * MIB), STATE_VOLUME_NEARLY_FULL),  # 11 MiB free: above 1% and 8 MiB
        (VolumeUsage(GIB, 10 * MIB), STATE_VOLUME_FULL),  # under 1% of 1 GiB (10.24 MiB) free
        (VolumeUsage(64 * MIB, 0), STATE_VOLUME_FULL),  # filled to the last block
        (VolumeUsage(64 * MIB, 7 * MIB), STATE_VOLUME_FULL),  # small volume: under 8 MiB free
        (VolumeUsage(64 * MIB, 9 * MIB), None),  # 86% used, 9 MiB free: neither
        (VolumeUsage(64 * MIB, 63 * MIB), None),
        (VolumeUsage(1000 * GIB, 5 * GIB), STATE_VOLUME_FULL),  # huge volume: 1% (10 GiB) is the floor
    ],
)
def test_full_and_nearly_full_by_free_space(usage, reason):
    problem = state_volume_problem(usage, CLAIM)
    assert (problem.reason if problem else None) == reason


def test_the_full_message_names_the_claim_what_slurm_does_and_the_fix():
    problem = state_volume_problem(VolumeUsage(64 * MIB, 0), CLAIM)
    message = problem.message
    assert message.startswith(f"PersistentVolumeClaim {CLAIM} (slurmctld's StateSaveLocation) is full (0 B of 64 MiB free)")
    assert "refuses new jobs" in message and "cannot save its state" in message
    assert "spec.controller.persistence.size" in message and "clears once 8 MiB are free" in message


def test_the_nearly_full_message_says_how_much_is_used():
    problem = state_volume_problem(VolumeUsage(GIB, 100 * MIB), CLAIM)
    assert "is 90% used (100 MiB of 1 GiB free)" in problem.message and CLAIM in problem.message


@pytest.mark.parametrize("previous", [None, StateVolumeProblem(STATE_VOLUME_FULL, "full, as reported before")])
def test_without_a_measurement_what_was_reported_stands(previous):
    assert state_volume_problem(None, CLAIM, previous) == previous


def test_a_measurement_replaces_the_report():
    previous = StateVolumeProblem(STATE_VOLUME_FULL, "full")
    assert state_volume_problem(VolumeUsage(64 * MIB, 60 * MIB), CLAIM, previous) is None


FULL = StateVolumeProblem(STATE_VOLUME_FULL, "full: do this")
FULL_LATER = StateVolumeProblem(STATE_VOLUME_FULL, "full, with other numbers")
NEARLY = StateVolumeProblem(STATE_VOLUME_NEARLY_FULL, "nearly full")


@pytest.mark.parametrize(
    "previous, current, events",
    [
        (None, None, []),
        (None, FULL, [("Warning", STATE_VOLUME_FULL, "full: do this")]),
        (FULL, FULL_LATER, []),  # still full: nothing new to say, however the numbers move
        (NEARLY, FULL, [("Warning", STATE_VOLUME_FULL, "full: do this")]),
        (FULL, NEARLY, [("Warning", STATE_VOLUME_NEARLY_FULL, "nearly full")]),
        (FULL, None, [("Normal", STATE_VOLUME_RECOVERED,
                       f"PersistentVolumeClaim {CLAIM} (slurmctld's StateSaveLocation) has room again")]),
    ],
)
def test_events_only_for_a_change(previous, current, events):
    assert state_volume_events(previous, current, CLAIM) == events


@pytest.mark.parametrize(
    "conditions, problem",
    [
        ([], None),
        ([{"type": "Degraded", "status": "True", "reason": STATE_VOLUME_FULL, "message": "m"}],
         StateVolumeProblem(STATE_VOLUME_FULL, "m")),
        ([{"type": "Degraded", "status": "False", "reason": "AsExpected", "message": ""}], None),
        # Degraded for another reason (a failed step): not a report of the volume
        ([{"type": "Degraded", "status": "True", "reason": "SyncSlurmFailed", "message": "m"}], None),
        ([{"type": "Ready", "status": "True", "reason": STATE_VOLUME_FULL, "message": "m"}], None),
    ],
)
def test_the_last_report_is_read_from_degraded(conditions, problem):
    assert reported_problem(conditions) == problem
