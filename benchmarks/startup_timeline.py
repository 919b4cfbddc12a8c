"""Where the time of `kubectl apply` -> every node idle goes (issue 16, item 2): read back from
the objects themselves once the cluster is up, so measuring adds nothing to what is measured.

For each component (the app.kubernetes.io/component label the operator puts on its pods) the
seconds after the apply at which its last pod was created (the operator made its StatefulSet,
the StatefulSet controller the pod), scheduled, had its main containers started (image present,
init containers done) and turned Ready (probes passed). The API server's timestamps have
one-second resolution, so each figure is within a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kubeslurm.ownership import COMPONENT

STAGES = ("created", "scheduled", "started", "ready")


@dataclass(frozen=True)
class ComponentTimes:
    component: str
    pods: int
    created: float | None
    scheduled: float | None
    started: float | None
    ready: float | None


def _seconds_after(stamp: str | None, applied_at: datetime) -> float | None:
    if not stamp:
        return None
    # The API server truncates to the second: an object made within the apply's own second
    # reads a fraction before it; that is 0.
    return max(0.0, (datetime.fromisoformat(stamp.replace("Z", "+00:00")) - applied_at).total_seconds())


def _condition_time(pod: dict, kind: str) -> str | None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == kind and condition["status"] == "True":
            return condition.get("lastTransitionTime")
    return None


def _started(pod: dict) -> str | None:
    """When the last of the pod's containers started (None while one has not)."""
    stamps = [status.get("state", {}).get("running", {}).get("startedAt")
              for status in pod.get("status", {}).get("containerStatuses", [])]
    return max(stamps) if stamps and all(stamps) else None


def pod_stages(pod: dict, applied_at: datetime) -> dict[str, float | None]:
    """One pod's stages, in seconds after applied_at (None: not reached)."""
    return {"created": _seconds_after(pod["metadata"].get("creationTimestamp"), applied_at),
            "scheduled": _seconds_after(_condition_time(pod, "PodScheduled"), applied_at),
            "started": _seconds_after(_started(pod), applied_at),
            "ready": _seconds_after(_condition_time(pod, "Ready"), applied_at)}


def startup_timeline(pods: list[dict], applied_at: datetime) -> list[ComponentTimes]:
    """Each component's stages (its last pod's, so the component is done at that time), ordered
    by when the component turned Ready; pods without the component label are left out."""
    by_component: dict[str, list[dict[str, float | None]]] = {}
    for pod in pods:
        component = pod["metadata"].get("labels", {}).get(COMPONENT)
        if component:
            by_component.setdefault(component, []).append(pod_stages(pod, applied_at))

    def last(stages: list[dict[str, float | None]], stage: str) -> float | None:
        values = [s[stage] for s in stages]
        return None if any(v is None for v in values) else max(values)

    timeline = [ComponentTimes(component, len(stages), *(last(stages, stage) for stage in STAGES))
                for component, stages in by_component.items()]
    return sorted(timeline, key=lambda t: (t.ready is None, t.ready or 0.0, t.component))


def at(value: float | None) -> str:
    """A stage's time for people: `+4 s`, or `-` when it was not reached."""
    return "-" if value is None else f"+{value:.0f} s"


def describe(timeline: list[ComponentTimes]) -> str:
    """One line per component: `slurmd (3 pods): created +2 s, scheduled +2 s, started +9 s, Ready +14 s`."""
    return "\n".join(f"{t.component} ({t.pods} pod{'s' if t.pods != 1 else ''}): " +
                     ", ".join(f"{stage if stage != 'ready' else 'Ready'} {at(getattr(t, stage))}" for stage in STAGES)
                     for t in timeline)
