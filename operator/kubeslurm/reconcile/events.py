"""Kubernetes Events about our objects, the way built-in controllers post them.

Only transitions are posted (a failure, a drain, an applied change); a reconcile
that changes nothing posts nothing. Identical events within a run of the
operator are posted once, so a step that keeps failing does not flood the API.
"""

import logging
import threading
from datetime import datetime, timezone

from .kube_api import KubeApi

log = logging.getLogger(__name__)
REPORTING_CONTROLLER = "kubeslurm.io/operator"


class EventRecorder:
    def __init__(self, api: KubeApi, instance: str = "kubeslurm"):
        self.api = api
        self.instance = instance
        self._posted: set[tuple] = set()
        self._lock = threading.Lock()

    def normal(self, obj: dict, reason: str, message: str) -> None:
        self._post(obj, "Normal", reason, message)

    def warning(self, obj: dict, reason: str, message: str) -> None:
        self._post(obj, "Warning", reason, message)

    def _post(self, obj: dict, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        key = (meta.get("uid"), meta.get("generation"), event_type, reason, message)
        with self._lock:
            if key in self._posted:
                return
            self._posted.add(key)
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "kubeslurm"},
            "reportingComponent": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "firstTimestamp": now[:19] + "Z",
            "lastTimestamp": now[:19] + "Z",
            "count": 1,
        }
        try:
            self.api.create(event)
        except Exception as error:  # an Event is best effort: never fail a reconcile over it
            log.warning("could not post event %s on %s: %s", reason, meta["name"], error)
