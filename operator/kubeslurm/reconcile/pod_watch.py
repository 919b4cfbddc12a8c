"""The pods whose changes wake a cluster's reconcile, selected by the API server.

The operator follows two small sets of pods: its own (label app.kubernetes.io/managed-by=
kubeslurm: slurmd, slurmctld, login, ... whose state Slurm's nodes follow) and the pods that ask
a kubeslurm scheduler (spec.schedulerName kubeslurm-<cluster>: Slurm-scheduled pods, issue 18).
kopf cannot have the API server filter a watch: it decodes every pod event of the cluster, then
applies its label filter, and keeps a worker holding the decoded pod for each pod whose events
come. With 1000 slurmd pods starting (and every other pod of the cluster counted too) that made
the operator's peak memory. Here each set is one list and then a watch from the list's
resourceVersion with the selector in the request, read and decoded one event at a time in a
thread of its own, then dropped (the owned pods' watch keeps a trimmed copy in a PodCache,
which the reconcile reads instead of listing them: pod_cache.py). The field selector `spec.schedulerName!=default-scheduler`
is as close as the API server gets to "starts with kubeslurm-" (it compares whole values); the
few pods of other schedulers it lets through are passed over here.

A watch that ends (the server's timeout, a lost connection) starts again from the last
resourceVersion seen (bookmarks keep it fresh); a version the server no longer has (410 Gone)
means a new list, whose pods are handed over again, as a watch restart in any controller does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client.rest import ApiException

from ..ownership import MANAGED_BY, MANAGER, POD
from .kube_api import KubeApi
from .pod_cache import PodCache

log = logging.getLogger(__name__)
GONE = 410
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
WATCH_SECONDS = 240  # the server ends each watch after this; the next goes on from its last version


@dataclass(frozen=True)
class PodSelection:
    """Which pods one watch follows, as the API server selects them."""

    name: str
    label_selector: str | None = None
    field_selector: str | None = None


OWNED_PODS = PodSelection("owned-pods", label_selector=f"{MANAGED_BY}={MANAGER}")
OTHER_SCHEDULERS_PODS = PodSelection("bridged-pods", field_selector="spec.schedulerName!=default-scheduler")

PodHandler = Callable[[str, dict], None]  # (event type: ADDED/MODIFIED/DELETED, or LISTED; the pod)


class PodWatch:
    """One selection in one namespace (None: every namespace), handed to on_pod event by event."""

    def __init__(self, api: KubeApi, selection: PodSelection, namespace: str | None, on_pod: PodHandler,
                 stopped: threading.Event, watch_seconds: int = WATCH_SECONDS, cache: PodCache | None = None):
        self.api = api
        self.cache = cache  # kept up to date before on_pod hears of a change (pod_cache.py)
        self.selection = selection
        self.namespace = namespace
        self.on_pod = on_pod
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
        pods, self.resource_version = self.api.list_with_version(
            POD, self.namespace, self.selection.label_selector, self.selection.field_selector)
        if self.cache is not None:
            self.cache.replace(self.namespace, pods)
        for pod in pods:
            self._hand_over("LISTED", pod)

    def _watch(self) -> None:
        for event_type, obj in self.api.watch(POD, self.namespace, self.resource_version,
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

    def _hand_over(self, event_type: str, pod: dict) -> None:
        try:
            self.on_pod(event_type, pod)
        except Exception:  # a handler's bug must not end the watch of every pod
            log.exception("%s: handling %s of pod %s/%s failed", self.selection.name, event_type,
                          pod["metadata"].get("namespace"), pod["metadata"].get("name"))

    def _wait_to_retry(self, why: str, retry: float) -> float:
        log.warning("%s watch in %s ended (%s); again in %.0f s", self.selection.name, self.namespace or "every namespace",
                    why, retry)
        self.stopped.wait(retry)
        return min(MAX_RETRY_SECONDS, retry * 2)


def start_pod_watches(api: KubeApi, namespaces: list[str] | None, handlers: dict[PodSelection, PodHandler],
                      stopped: threading.Event, caches: dict[PodSelection, PodCache] | None = None) -> list[threading.Thread]:
    """A daemon thread per selection and namespace (one for all namespaces when None); a
    selection in `caches` keeps that cache."""
    threads = []
    for selection, on_pod in handlers.items():
        for namespace in namespaces or [None]:
            watch = PodWatch(api, selection, namespace, on_pod, stopped, cache=(caches or {}).get(selection))
            thread = threading.Thread(target=watch.run, name=f"{selection.name}-{namespace or 'all'}", daemon=True)
            thread.start()
            threads.append(thread)
    return threads
