"""The API server's audit log: which component wrote what, so a test can count the API
writes a component made (the operator's zero-writes-when-idle promise is checked so)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")

# Metadata (who, what verb, which object, response code) for every write; nothing
# for reads, so the log stays small and a test can count writes by user.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"""


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


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
