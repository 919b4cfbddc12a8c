"""The apply -> idle breakdown of `make bench` read back from pods (benchmarks/startup_timeline.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from benchmarks.startup_timeline import ComponentTimes, describe, pod_stages, startup_timeline

APPLIED = datetime(2026, 12, 3, 20, 0, 0, tzinfo=timezone.utc)


def pod(name: str, component: str | None, created: int, scheduled: int | None = None, started: list | None = None,
        ready: int | None = None) -> dict:
    def stamp(second: int) -> str:
        return f"2026-12-03T20:00:{second:02d}Z"
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(scheduled)}] if scheduled else []
    conditions.append({"type": "Ready", "status": "True" if ready else "False",
                       "lastTransitionTime": stamp(ready or created)})
    return {"metadata": {"name": name, "creationTimestamp": stamp(created),
                         "labels": {"app.kubernetes.io/component": component} if component else {}},
            "status": {"conditions": conditions,
                       "containerStatuses": [{"state": {"running": {"startedAt": stamp(s)}} if s else {"waiting": {}}}
                                             for s in (started or [])]}}


def test_a_pods_stages_in_seconds_after_the_apply():
    assert pod_stages(pod("c-0", "controller", 2, 3, [9, 11], 20), APPLIED) == {
        "created": 2, "scheduled": 3, "started": 11, "ready": 20}
    # not yet Ready, a container still waiting: those stages are not reached
    assert pod_stages(pod("c-0", "controller", 2, 3, [9, None]), APPLIED) == {
        "created": 2, "scheduled": 3, "started": None, "ready": None}


def test_each_component_is_done_when_its_last_pod_is_and_components_come_in_order_of_ready():
    pods = [pod("db-0", "database", 1, 1, [4], 9), pod("ctld-0", "controller", 2, 2, [5], 20),
            pod("cpu-0", "slurmd", 2, 3, [6], 14), pod("cpu-1", "slurmd", 2, 4, [8], 31),
            pod("stray", None, 0, 0, [1], 1)]
    timeline = startup_timeline(pods, APPLIED)
    assert timeline == [ComponentTimes("database", 1, 1, 1, 4, 9), ComponentTimes("controller", 1, 2, 2, 5, 20),
                        ComponentTimes("slurmd", 2, 2, 4, 8, 31)]
    assert describe(timeline).splitlines()[2] == "slurmd (2 pods): created +2 s, scheduled +4 s, started +8 s, Ready +31 s"


def test_a_component_with_a_pod_not_ready_comes_last_and_says_so():
    timeline = startup_timeline([pod("cpu-0", "slurmd", 2, 3, [6]), pod("db-0", "database", 1, 1, [4], 9)], APPLIED)
    assert [t.component for t in timeline] == ["database", "slurmd"]
    assert describe(timeline).endswith("Ready -")
