"""Whether slurmctld's state volume (StateSaveLocation, the controller's claim) has room.

slurmctld keeps its queue there: every accepted job's script and environment, and the state
files it rewrites every few seconds. When the volume fills, Slurm says so only in its log:
sbatch fails ("I/O error writing script/environment to file"), and saving state fails, so
a controller restart then loses what changed since the last save. Nothing in Kubernetes
notices (the pod stays Ready). So the operator looks at the volume's free space from inside
the controller pod (one `df` per reconcile, beside the commands it runs there anyway) and
reports a full or nearly full volume in the Degraded condition, with a Warning Event, until
there is room again.

Pure: `df` output in, a problem (reason, message) or None out, and the Events of a change.
"""

from dataclasses import dataclass

STATE_VOLUME_FULL = "ControllerStateVolumeFull"
STATE_VOLUME_NEARLY_FULL = "ControllerStateVolumeNearlyFull"
STATE_VOLUME_RECOVERED = "ControllerStateVolumeRecovered"
STATE_VOLUME_REASONS = (STATE_VOLUME_FULL, STATE_VOLUME_NEARLY_FULL)
MIB = 1024 * 1024
# Full: less than this is free. slurmctld writes a job's script and environment (tens of KiB)
# at submission and its whole job state (a few MiB with thousands of jobs) at each save.
FULL_BELOW_BYTES = 8 * MIB
FULL_BELOW_FRACTION = 0.01
# Nearly full: this much of the volume used; time to act before jobs are refused.
NEARLY_FULL_FRACTION = 0.90


@dataclass(frozen=True)
class VolumeUsage:
    size_bytes: int
    available_bytes: int

    @property
    def used_fraction(self) -> float:
        return 1 - self.available_bytes / self.size_bytes if self.size_bytes else 1.0


@dataclass(frozen=True)
class StateVolumeProblem:
    reason: str
    message: str


def df_argv(path: str) -> list[str]:
    """POSIX df of one path, sizes in 1024-byte blocks: one line after the header."""
    return ["df", "-P", "-k", "--", path]


def parse_df(text: str) -> VolumeUsage:
    """`df -P -k PATH`: `Filesystem 1024-blocks Used Available Capacity Mounted-on` and one row.
    The file system's name may hold spaces, so the numbers are read from the right."""
    rows = [line.split() for line in text.strip().splitlines()[1:] if line.strip()]
    if len(rows) != 1 or len(rows[0]) < 6:
        raise ValueError(f"unexpected df output: {text.strip()[:200]!r}")
    blocks, _used, available = rows[0][-5:-2]
    if not (blocks.isdigit() and available.isdigit()):
        raise ValueError(f"unexpected df output: {text.strip()[:200]!r}")
    return VolumeUsage(int(blocks) * 1024, int(available) * 1024)


def full_below(size_bytes: int) -> int:
    """Free bytes under which the volume counts as full."""
    return max(FULL_BELOW_BYTES, int(size_bytes * FULL_BELOW_FRACTION))


def state_volume_problem(
    usage: VolumeUsage | None, claim: str, previous: StateVolumeProblem | None = None
) -> StateVolumeProblem | None:
    """What to report of the state volume; `claim` is namespace/name of its PVC. Without a
    measurement this time (the controller pod's df failed), what was reported stands."""
    if usage is None:
        return previous
    free, size = _size(usage.available_bytes), _size(usage.size_bytes)
    where = f"PersistentVolumeClaim {claim} (slurmctld's StateSaveLocation)"
    fix = ("Free space on it (scripts of finished jobs go after MinJobAge) or give it more: raise "
           "spec.controller.persistence.size (the claim grows where its StorageClass allows volume expansion)")
    if usage.available_bytes < full_below(usage.size_bytes):
        return StateVolumeProblem(
            STATE_VOLUME_FULL,
            f"{where} is full ({free} of {size} free): slurmctld refuses new jobs and cannot save its state, "
            f"so a controller restart now would lose what changed since its last save. {fix}; "
            f"this clears once {_size(full_below(usage.size_bytes))} are free.",
        )
    if usage.used_fraction >= NEARLY_FULL_FRACTION:
        return StateVolumeProblem(
            STATE_VOLUME_NEARLY_FULL,
            f"{where} is {usage.used_fraction:.0%} used ({free} of {size} free): once full, slurmctld refuses "
            f"new jobs and cannot save its state. {fix}.",
        )
    return None


def reported_problem(conditions: list[dict]) -> StateVolumeProblem | None:
    """The state-volume problem the last status reported in Degraded, if that is what it says."""
    for condition in conditions or []:
        if condition.get("type") == "Degraded" and condition.get("status") == "True" \
                and condition.get("reason") in STATE_VOLUME_REASONS:
            return StateVolumeProblem(condition["reason"], condition.get("message", ""))
    return None


def state_volume_events(
    previous: StateVolumeProblem | None, current: StateVolumeProblem | None, claim: str
) -> list[tuple[str, str, str]]:
    """(Normal|Warning, reason, message) to post for a change of the report; none while it stays."""
    if current is not None and (previous is None or previous.reason != current.reason):
        return [("Warning", current.reason, current.message)]
    if current is None and previous is not None:
        return [("Normal", STATE_VOLUME_RECOVERED,
                 f"PersistentVolumeClaim {claim} (slurmctld's StateSaveLocation) has room again")]
    return []


def _size(count: int) -> str:
    for unit, factor in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", 1024)):
        if count >= factor:
            return f"{count / factor:.1f} {unit}".replace(".0 ", " ")
    return f"{count} B"
