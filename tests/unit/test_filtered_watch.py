"""The filtered watches' bookkeeping: where a watch goes on from, when it lists again (410 Gone, as
a response or as an ERROR event), and that neither a broken handler nor an error ends it. The
API server side (selection, list then watch, deletions) is tests/k8s/test_filtered_watch.py's."""

from __future__ import annotations

import threading

from kubernetes.client.rest import ApiException

from kubeslurm.ownership import MANAGED_BY, MANAGER, POD, WATCHED_KINDS
from kubeslurm.reconcile import filtered_watch
from kubeslurm.reconcile.filtered_watch import OWNED_OBJECTS, OWNED_PODS, FilteredWatch


def a_pod(name: str, version: str) -> dict:
    return {"metadata": {"name": name, "namespace": "hpc", "resourceVersion": version}}


class ScriptedServer:
    """Answers list_with_version and watch from a script, recording where each watch started."""

    def __init__(self, lists, watches, stopped):
        self.lists = list(lists)
        self.watches = list(watches)
        self.started_at: list[str] = []
        self.stopped = stopped

    def list_with_version(self, kind, namespace, label_selector, field_selector):
        assert (kind, label_selector, field_selector) == (POD, OWNED_PODS.label_selector, OWNED_PODS.field_selector)
        return self.lists.pop(0)

    def watch(self, kind, namespace, resource_version, label_selector, field_selector, *, timeout_seconds):
        assert kind == POD
        self.started_at.append(resource_version)
        if not self.watches:
            self.stopped.set()
            return
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step


def run(server_script, monkeypatch) -> tuple[list, ScriptedServer]:
    monkeypatch.setattr(filtered_watch, "FIRST_RETRY_SECONDS", 0.01)
    stopped = threading.Event()
    lists, watches = server_script
    server = ScriptedServer(lists, watches, stopped)
    seen = []

    def on_pod(event_type, pod):
        if pod["metadata"]["name"] == "breaks-the-handler":
            raise RuntimeError("a handler's bug")
        seen.append((event_type, pod["metadata"]["name"]))

    FilteredWatch(server, OWNED_PODS, "hpc", on_pod, stopped).run()
    return seen, server


def test_each_watch_goes_on_from_the_last_version_bookmarks_included(monkeypatch):
    seen, server = run((
        [([a_pod("a", "5")], "10")],
        [[("ADDED", a_pod("b", "11")), ("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
         [("DELETED", a_pod("b", "16"))]],
    ), monkeypatch)
    assert seen == [("LISTED", "a"), ("ADDED", "b"), ("DELETED", "b")]
    assert server.started_at == ["10", "15", "16"]


def test_a_version_the_server_no_longer_has_means_a_new_list_as_an_event_or_as_a_response(monkeypatch):
    gone_event = ("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})
    seen, server = run((
        [([a_pod("a", "5")], "10"), ([a_pod("a", "5"), a_pod("b", "20")], "30"), ([], "50")],
        [[gone_event], ApiException(status=410, reason="Gone")],
    ), monkeypatch)
    assert seen == [("LISTED", "a"), ("LISTED", "a"), ("LISTED", "b")]
    assert server.started_at == ["10", "30", "50"]


def test_neither_a_broken_handler_nor_a_lost_connection_ends_the_watch(monkeypatch):
    seen, server = run((
        [([], "10")],
        [[("ADDED", a_pod("breaks-the-handler", "11")), ("ADDED", a_pod("c", "12"))],
         ConnectionResetError("connection reset by peer"),
         ApiException(status=500, reason="Internal Server Error"),
         [("MODIFIED", a_pod("c", "13"))]],
    ), monkeypatch)
    assert seen == [("ADDED", "c"), ("MODIFIED", "c")]
    assert server.started_at == ["10", "12", "12", "12", "13"]


def test_every_kind_the_operator_applies_and_watches_is_selected_by_our_label_on_the_server():
    """Drift in any of them (an edit, a deletion) must wake the reconcile, and only ours may come:
    a watch without the selector would bring every ConfigMap and StatefulSet of the cluster."""
    assert [s.kind for s in OWNED_OBJECTS] == list(WATCHED_KINDS)
    assert {s.label_selector for s in OWNED_OBJECTS} == {OWNED_PODS.label_selector} == {f"{MANAGED_BY}={MANAGER}"}
    assert len({s.name for s in (*OWNED_OBJECTS, OWNED_PODS)}) == len(OWNED_OBJECTS) + 1  # names the threads and logs
