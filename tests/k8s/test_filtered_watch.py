"""The operator's filtered watches against the real API server: the server selects the pods (our
label; a scheduler other than the default) and the objects the operator applies (our label), so
others never reach the operator; those there before are handed over from the list, later ones
from the watch, edits and deletions too; a watch the
server ends (its timeout) goes on from where it was; the owned pods' watch keeps the cache
the reconcile reads (pod_cache.py) as the API server lists them.

No kubelet runs in this tier: the pods stay Pending, which is all a watch needs.
"""

from __future__ import annotations

import queue
import threading

import pytest

from kubeslurm.ownership import CLUSTER, CONFIG_MAP, MANAGED_BY, MANAGER, POD, STATEFUL_SET
from kubeslurm.reconcile.kube_api import KubeApi, load_api_client
from kubeslurm.reconcile.pod_cache import PodCache, kept_of
from kubeslurm.reconcile import handlers
from kubeslurm.reconcile.filtered_watch import OTHER_SCHEDULERS_PODS, OWNED_OBJECTS, OWNED_PODS, FilteredWatch
from testbed.waiting import wait_for

pytestmark = pytest.mark.k8s


@pytest.fixture
def kube(control_plane):
    return KubeApi(load_api_client(str(control_plane.kubeconfig_path)))


def pod(namespace: str, name: str, labels: dict | None = None, scheduler: str | None = None) -> dict:
    spec = {"containers": [{"name": "main", "image": "registry.example/main:1"}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": spec}


class Watching:
    """A FilteredWatch in its own thread, each (event type, object name) it hands over in a queue."""

    def __init__(self, kube, selection, namespace, watch_seconds=240, cache=None):
        self.seen: queue.Queue = queue.Queue()
        self.stopped = threading.Event()
        self.watch = FilteredWatch(kube, selection, namespace, lambda t, p: self.seen.put((t, p["metadata"]["name"])),
                              self.stopped, watch_seconds=watch_seconds, cache=cache)
        self.thread = threading.Thread(target=self.watch.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        # Listed: what is created from now on comes from the watch (ADDED), never from the list.
        wait_for(lambda: self.watch.resource_version is not None, 30, "the watch's first list", interval=0.05)
        return self

    def __exit__(self, *exc):
        self.stopped.set()

    def next(self, timeout=30) -> tuple[str, str]:
        return self.seen.get(timeout=timeout)

    def nothing_more(self, wait=2.0) -> bool:
        try:
            extra = self.seen.get(timeout=wait)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected: {extra}")


OURS = {MANAGED_BY: MANAGER, CLUSTER: "research"}


def test_only_our_pods_reach_the_owned_pods_watch_listed_then_watched_then_deleted(kube, namespace):
    kube.create(pod(namespace, "before", OURS))
    kube.create(pod(namespace, "stranger-before", {"app": "other"}))
    with Watching(kube, OWNED_PODS, namespace) as watching:
        assert watching.next() == ("LISTED", "before")
        kube.create(pod(namespace, "stranger", {"app": "other"}))
        kube.create(pod(namespace, "after", OURS))
        assert watching.next() == ("ADDED", "after")
        kube.merge_patch(POD, namespace, "after", {"metadata": {"annotations": {"touched": "yes"}}})
        assert watching.next() == ("MODIFIED", "after")
        kube.delete(POD, namespace, "before")
        # its deletionTimestamp first (MODIFIED), then gone
        assert watching.next() == ("MODIFIED", "before")
        assert watching.next() == ("DELETED", "before")
        assert watching.nothing_more()


def test_the_owned_pods_watch_keeps_a_cache_the_reconcile_can_read_instead_of_the_api_server(kube, namespace):
    selector = f"{MANAGED_BY}={MANAGER},{CLUSTER}=research"
    kube.create(pod(namespace, "before", OURS))
    cache = PodCache()
    with Watching(kube, OWNED_PODS, namespace, cache=cache) as watching:
        assert watching.next() == ("LISTED", "before")
        kube.create(pod(namespace, "after", OURS))
        kube.create(pod(namespace, "stranger", {"app": "other"}))
        assert watching.next() == ("ADDED", "after")
        kube.merge_patch(POD, namespace, "after", {"metadata": {"annotations": {"touched": "yes"}}})
        assert watching.next() == ("MODIFIED", "after")
        kube.delete(POD, namespace, "before")
        assert watching.next() == ("MODIFIED", "before") and watching.next() == ("DELETED", "before")
        # What the reconcile would list, minus the bulk the cache does not keep.
        listed = kube.list(POD, namespace, selector)
        cached = cache.pods(namespace, selector)
        assert [p["metadata"]["name"] for p in cached] == [p["metadata"]["name"] for p in listed] == ["after"]
        assert cached[0] == kept_of(listed[0])
        assert cached[0]["metadata"]["annotations"] == {"touched": "yes"}
        assert "managedFields" not in cached[0]["metadata"] and listed[0]["metadata"].get("managedFields")
        assert cache.pods("elsewhere", selector) is None  # this watch listed only its namespace


def test_pods_of_other_schedulers_than_the_default_reach_the_bridged_pods_watch(kube, namespace):
    with Watching(kube, OTHER_SCHEDULERS_PODS, namespace) as watching:
        kube.create(pod(namespace, "default-scheduled"))
        kube.create(pod(namespace, "served", scheduler="kubeslurm-research"))
        assert watching.next() == ("ADDED", "served")
        assert watching.nothing_more()


def test_a_watch_the_server_ends_goes_on_from_the_last_version_it_saw(kube, namespace):
    with Watching(kube, OWNED_PODS, namespace, watch_seconds=1) as watching:
        kube.create(pod(namespace, "first", OURS))
        assert watching.next() == ("ADDED", "first")
        for round_ in range(3):  # each watch lasts a second: created between two of them
            threading.Event().wait(1.5)
            kube.create(pod(namespace, f"later-{round_}", OURS))
            assert watching.next() == ("ADDED", f"later-{round_}")
        # no relist: "first" is not handed over again
        assert watching.nothing_more()



def config_map(namespace: str, name: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"slurm.conf": "ClusterName=research\n"}}


def test_only_the_objects_we_applied_reach_their_kinds_watch_edits_and_deletions_included(kube, namespace):
    """What wakes a reconcile to mend drift: someone edits or deletes one of our ConfigMaps."""
    owned_config_maps = next(s for s in OWNED_OBJECTS if s.kind == CONFIG_MAP)
    kube.create(config_map(namespace, "research-slurm-before", OURS))
    kube.create(config_map(namespace, "someone-elses-before", {"app": "other"}))
    with Watching(kube, owned_config_maps, namespace) as watching:
        assert watching.next() == ("LISTED", "research-slurm-before")
        kube.create(config_map(namespace, "someone-elses", {"app": "other"}))
        kube.create(config_map(namespace, "research-slurm", OURS))
        assert watching.next() == ("ADDED", "research-slurm")
        kube.merge_patch(CONFIG_MAP, namespace, "research-slurm", {"data": {"slurm.conf": "edited by hand\n"}})
        assert watching.next() == ("MODIFIED", "research-slurm")
        kube.merge_patch(CONFIG_MAP, namespace, "someone-elses", {"data": {"x": "y"}})
        kube.delete(CONFIG_MAP, namespace, "research-slurm-before")
        assert watching.next() == ("DELETED", "research-slurm-before")
        assert watching.nothing_more()


def test_a_statefulset_we_applied_reaches_its_watch_and_a_stranger_does_not(kube, namespace):
    owned_statefulsets = next(s for s in OWNED_OBJECTS if s.kind == STATEFUL_SET)

    def statefulset(name: str, labels: dict) -> dict:
        selector = {"app": name}
        return {"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"replicas": 0, "serviceName": name, "selector": {"matchLabels": selector},
                         "template": {"metadata": {"labels": selector}, "spec": pod(namespace, name)["spec"]}}}

    with Watching(kube, owned_statefulsets, namespace) as watching:
        kube.create(statefulset("bare", {"app": "other"}))
        kube.create(statefulset("research-h100", OURS))
        assert watching.next() == ("ADDED", "research-h100")
        kube.merge_patch(STATEFUL_SET, namespace, "research-h100", {"spec": {"replicas": 1}})
        assert watching.next() == ("MODIFIED", "research-h100")
        kube.merge_patch(STATEFUL_SET, namespace, "bare", {"spec": {"replicas": 1}})
        # ours again as its controller writes its status (no kubelet: its pod stays Pending)
        assert watching.next() == ("MODIFIED", "research-h100")


def test_the_operator_s_watches_wake_the_cluster_whose_object_changed_and_no_other(control_plane, kube, namespace, monkeypatch):
    """The wiring of handlers.py: what kopf watched before (our applied objects) now comes from
    these watches, and an edit or a deletion of one wakes its cluster's reconcile at once, not
    at the next resync."""
    runtime = handlers.Runtime()
    runtime.namespaces = [namespace]
    runtime.start(str(control_plane.kubeconfig_path))
    monkeypatch.setattr(handlers, "RUNTIME", runtime)
    research, other = runtime.wakeup(namespace, "research"), runtime.wakeup(namespace, "other")
    kube.create(config_map(namespace, "research-slurm", OURS))
    runtime.watch(handlers.watch_handlers())
    try:
        wait_for(lambda: runtime.owned_pods.pods(namespace, f"{MANAGED_BY}={MANAGER}") is not None, 30,
                 "the watches' first lists", interval=0.05)
        wait_for(research.is_set, 30, "the listed ConfigMap to wake its cluster", interval=0.05)
        for change in (lambda: kube.merge_patch(CONFIG_MAP, namespace, "research-slurm", {"data": {"x": "edited"}}),
                       lambda: kube.create({"apiVersion": "v1", "kind": "Service",
                                            "metadata": {"name": "research-controller", "namespace": namespace,
                                                         "labels": OURS},
                                            "spec": {"clusterIP": "None", "selector": {"a": "b"}}}),
                       lambda: kube.delete(CONFIG_MAP, namespace, "research-slurm")):
            research.clear()
            change()
            wait_for(research.is_set, 30, "the change to wake the research cluster", interval=0.05)
        research.clear()
        kube.create(config_map(namespace, "not-ours", {"app": "other"}))
        kube.create(config_map(namespace, "another-cluster-s", {MANAGED_BY: MANAGER, CLUSTER: "other"}))
        wait_for(other.is_set, 30, "the other cluster's ConfigMap to wake it", interval=0.05)
        assert not research.is_set()
    finally:
        runtime.stop_watches()
