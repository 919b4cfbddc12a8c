"""The API server's audit log: which component wrote what, so a test can count the API
writes a component made (the operator's zero-writes-when-idle promise is checked so)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list")


def audit_policy(verbs: tuple[str, ...]) -> str:
    """Metadata (who, what verb, which object, response code) of the requests with these
    verbs, nothing of the others, so the log stays small and a test can count by user."""
    return f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [{", ".join(verbs)}]
  - level: None
"""


AUDIT_POLICY = audit_policy(WRITE_VERBS)
# Reads too: for counting a component's gets and lists (a no-op reconcile's must not grow with the pods).
AUDIT_POLICY_WITH_READS = audit_policy(WRITE_VERBS + READ_VERBS)


class AuditLog:
    def __init__(self, path: Path):
        self.path = path

    def mark(self) -> int:
        """A position in the log; writes(since=mark) sees only later events."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def writes(self, since: dt.datetime | int | None = None, user: str | None = None, *,
               verbs: tuple[str, ...] = WRITE_VERBS) -> list[dict]:
        """Write requests the API server has finished (audit stage ResponseComplete).

        since: a mark() (exact) or a datetime (compared with the time the request was
        received; naive means UTC). user: the authenticated user name, e.g.
        'system:serviceaccount:ns:name'. The API server writes an event right after it
        answers, so poll briefly when counting a request just made.
        """
        offset = since if isinstance(since, int) else 0
        if isinstance(since, dt.datetime) and since.tzinfo is None:
            since = since.replace(tzinfo=dt.timezone.utc)
        try:
            with self.path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return []
        events = []
        for raw in data.splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # a line still being written
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in verbs:
                continue
            if user is not None and event.get("user", {}).get("username") != user:
                continue
            if isinstance(since, dt.datetime):
                received = _parse_time(event.get("requestReceivedTimestamp"))
                if received is None or received < since:
                    continue
            events.append(event)
        return events

    def reads(self, since: dt.datetime | int | None = None, user: str | None = None) -> list[dict]:
        """Gets and lists the API server answered (logged only under AUDIT_POLICY_WITH_READS)."""
        return self.writes(since, user, verbs=READ_VERBS)


def per_cycle(requests: list[dict], starts_cycle) -> tuple[float, dict[str, float]]:
    """Requests per cycle of a component that repeats the same work (a reconcile), counted over
    whole cycles only: from the first request for which starts_cycle(request) is true to the
    last one, exclusive. Returns (requests per cycle, verb and resource -> per cycle); (0, {})
    with fewer than two starts."""
    starts = [i for i, request in enumerate(requests) if starts_cycle(request)]
    if len(starts) < 2:
        return 0.0, {}
    cycles = len(starts) - 1
    whole = requests[starts[0]:starts[-1]]
    by_kind: dict[str, float] = {}
    for request in whole:
        key = f"{request['verb']} {request.get('objectRef', {}).get('resource', '?')}"
        by_kind[key] = by_kind.get(key, 0) + 1 / cycles
    return len(whole) / cycles, dict(sorted(by_kind.items()))


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
