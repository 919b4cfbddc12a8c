"""The objects whose changes wake a cluster's reconcile, selected by the API server.

The operator follows small sets of objects: its own pods (label app.kubernetes.io/managed-by=
kubeslurm: slurmd, slurmctld, login, ... whose state Slurm's nodes follow), the pods that ask a
kubeslurm scheduler (spec.schedulerName kubeslurm-<cluster>: Slurm-scheduled pods, issue 18), and
the objects it applies (StatefulSets, Services, ConfigMaps, PodDisruptionBudgets, NetworkPolicies
under the same label: an edit or a deletion of one is drift the next reconcile mends).
kopf cannot have the API server filter a watch: it decodes every event of the kind in the
cluster (every ConfigMap, every StatefulSet's status), then applies its label filter, and for
each event it keeps builds the object's diff base (a deep copy) and runs the handler through
its executor. With 1000 slurmd pods starting that made the operator's peak memory; in a
scale-down of 1000 pods, kopf's share of the operator's CPU was over a third (py-spy, make
bench-scale). Here each selection is one list and then a watch from the list's resourceVersion
with the selector in the request, read and decoded one event at a time in a thread of its own,
then dropped (the owned pods' watch keeps a trimmed copy in a PodCache, which the reconcile
reads instead of listing them: pod_cache.py). The field selector
`spec.schedulerName!=default-scheduler` is as close as the API server gets to "starts with
kubeslurm-" (it compares whole values); the few pods of other schedulers it lets through are
passed over by their handler.

A watch that ends (the server's timeout, a lost connection) starts again from the last
resourceVersion seen (bookmarks keep it fresh); a version the server no longer has (410 Gone)
means a new list, whose objects are handed over again, as a watch restart in any controller does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client.rest import ApiException

from ..ownership import MANAGED_BY, MANAGER, POD, WATCHED_KINDS, Kind
from .kube_api import KubeApi
from .pod_cache import PodCache

log = logging.getLogger(__name__)
GONE = 410
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
WATCH_SECONDS = 240  # the server ends each watch after this; the next goes on from its last version


@dataclass(frozen=True)
class WatchSelection:
    """Which objects of a kind one watch follows, as the API server selects them."""

    name: str
    kind: Kind
    label_selector: str | None = None
    field_selector: str | None = None


OURS = f"{MANAGED_BY}={MANAGER}"
OWNED_PODS = WatchSelection("owned-pods", POD, label_selector=OURS)
OTHER_SCHEDULERS_PODS = WatchSelection("bridged-pods", POD, field_selector="spec.schedulerName!=default-scheduler")
OWNED_OBJECTS = tuple(WatchSelection(f"owned-{kind.plural}", kind, label_selector=OURS) for kind in WATCHED_KINDS)

WatchHandler = Callable[[str, dict], None]  # (event type: ADDED/MODIFIED/DELETED, or LISTED; the object)


class FilteredWatch:
    """One selection in one namespace (None: every namespace), handed to on_event event by event."""

    def __init__(self, api: KubeApi, selection: WatchSelection, namespace: str | None, on_event: WatchHandler,
                 stopped: threading.Event, watch_seconds: int = WATCH_SECONDS, cache: PodCache | None = None):
        self.api = api
        self.cache = cache  # kept up to date before on_event hears of a change (pod_cache.py)
        self.selection = selection
        self.namespace = namespace
        self.on_event = on_event
        self.stopped = stopped
        self.watch_seconds = watch_seconds
        self.resource_version: str | None = None  # None: list first

    def run(self) -> None:
        """Until `stopped` is set; errors are logged and retried with a backoff, never raised."""
        retry = FIRST_RETRY_SECONDS
        while not self.stopped.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
                retry = FIRST_RETRY_SECONDS
            except ApiException as error:
                if error.status == GONE:
                    self.resource_version = None
                    continue
                retry = self._wait_to_retry(f"HTTP {error.status} {error.reason}", retry)
            except Exception as error:  # noqa: BLE001 - a lost connection, a broken line: watch again
                retry = self._wait_to_retry(f"{type(error).__name__}: {error}", retry)

    def _list(self) -> None:
        listed, self.resource_version = self.api.list_with_version(
            self.selection.kind, self.namespace, self.selection.label_selector, self.selection.field_selector)
        if self.cache is not None:
            self.cache.replace(self.namespace, listed)
        for obj in listed:
            self._hand_over("LISTED", obj)

    def _watch(self) -> None:
        for event_type, obj in self.api.watch(self.selection.kind, self.namespace, self.resource_version,
                                               self.selection.label_selector, self.selection.field_selector,
                                               timeout_seconds=self.watch_seconds):
            if event_type == "ERROR":
                raise ApiException(status=obj.get("code", 500), reason=obj.get("reason", ""),
                                   body=obj.get("message", ""))
            self.resource_version = obj["metadata"].get("resourceVersion", self.resource_version)
            if event_type != "BOOKMARK":
                if self.cache is not None:
                    self.cache.changed(event_type, obj)
                self._hand_over(event_type, obj)
            if self.stopped.is_set():
                return

    def _hand_over(self, event_type: str, obj: dict) -> None:
        try:
            self.on_event(event_type, obj)
        except Exception:  # a handler's bug must not end the watch of every object
            log.exception("%s: handling %s of %s %s/%s failed", self.selection.name, event_type,
                          self.selection.kind.kind, obj["metadata"].get("namespace"), obj["metadata"].get("name"))

    def _wait_to_retry(self, why: str, retry: float) -> float:
        log.warning("%s watch in %s ended (%s); again in %.0f s", self.selection.name, self.namespace or "every namespace",
                    why, retry)
        self.stopped.wait(retry)
        return min(MAX_RETRY_SECONDS, retry * 2)


def start_watches(api: KubeApi, namespaces: list[str] | None, handlers: dict[WatchSelection, WatchHandler],
                  stopped: threading.Event, caches: dict[WatchSelection, PodCache] | None = None) -> list[threading.Thread]:
    """A daemon thread per selection and namespace (one for all namespaces when None); a
    selection in `caches` keeps that cache."""
    threads = []
    for selection, on_event in handlers.items():
        for namespace in namespaces or [None]:
            watch = FilteredWatch(api, selection, namespace, on_event, stopped, cache=(caches or {}).get(selection))
            thread = threading.Thread(target=watch.run, name=f"{selection.name}-{namespace or 'all'}", daemon=True)
            thread.start()
            threads.append(thread)
    return threads
