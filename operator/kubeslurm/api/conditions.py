"""Status conditions shared by every kind, following the Kubernetes API conventions."""

from datetime import datetime, timezone
from typing import Literal

from pydantic import Field

from .base import KubeModel

CONDITION_TYPES = ("Ready", "Progressing", "Degraded")
CONDITIONS_LIST = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


class Condition(KubeModel):
    """One observation, as in metav1.Condition."""

    type: str = Field(description="Ready, Progressing or Degraded; in ldap mode also AccountUsersInDirectory (the users of spec.accounts the directory lacks).")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(description="A CamelCase word for programs: why the status is what it is.")
    message: str = Field(default="", description="What a human should know, and what to do about it.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(default=None, description="The spec generation this describes.")


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: list[dict], new: dict) -> list[dict]:
    """Return `conditions` with `new` merged in; lastTransitionTime moves only when status does."""
    result = []
    replaced = False
    for existing in conditions:
        if existing.get("type") != new["type"]:
            result.append(existing)
            continue
        merged = dict(new)
        if existing.get("status") == new["status"] and existing.get("lastTransitionTime"):
            merged["lastTransitionTime"] = existing["lastTransitionTime"]
        result.append(merged)
        replaced = True
    if not replaced:
        result.append(new)
    return result
