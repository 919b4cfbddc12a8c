"""The three conditions every kubeslurm object reports, built from one reconcile's outcome."""

from ..api.conditions import now_rfc3339, set_condition


def conditions_for(
    existing: list[dict],
    generation: int | None,
    *,
    ready: bool,
    ready_reason: str,
    ready_message: str = "",
    progressing: str | None = None,
    degraded: tuple[str, str] | None = None,
) -> list[dict]:
    """Ready/Progressing/Degraded; `progressing` is a message or None, `degraded` (reason, message) or None."""
    stamp = now_rfc3339()

    def condition(kind: str, status: bool, reason: str, message: str) -> dict:
        return {
            "type": kind,
            "status": "True" if status else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": stamp,
            "observedGeneration": generation,
        }

    result = list(existing)
    result = set_condition(result, condition("Ready", ready, ready_reason, ready_message))
    result = set_condition(
        result, condition("Progressing", progressing is not None, "Reconciling" if progressing else "Stable", progressing or "")
    )
    reason, message = degraded if degraded else ("AsExpected", "")
    result = set_condition(result, condition("Degraded", degraded is not None, reason, message))
    return result


def same_conditions(a: list[dict], b: list[dict]) -> bool:
    """Equal apart from timestamps (which set_condition keeps stable anyway)."""

    def key(items):
        return sorted((c["type"], c["status"], c["reason"], c.get("message", ""), c.get("observedGeneration")) for c in items)

    return key(a or []) == key(b or [])
