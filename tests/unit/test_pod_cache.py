"""The owned pods' cache (reconcile/pod_cache.py): what it keeps of a pod, which namespaces it
answers for, how lists and watch events change it, and that the reconcile reads it instead of
the API server once it answers (and the API server before). Against the real API server, with
the operator's own watch: tests/k8s/test_filtered_watch.py."""

from __future__ import annotations

import threading

import pytest

from kubeslurm import ownership
from kubeslurm.reconcile.cluster_reconcile import ClusterReconciler
from kubeslurm.reconcile.pod_cache import PodCache, equality_selector, kept_of
from kubeslurm.reconcile.filtered_watch import OWNED_PODS, FilteredWatch

from .test_filtered_watch import ScriptedServer

SLURMD = ownership.cluster_selector("research", ownership.SLURMD)


def a_pod(namespace: str, name: str, component: str = ownership.SLURMD, uid: str | None = None, node: str = "") -> dict:
    labels = {ownership.MANAGED_BY: ownership.MANAGER, ownership.CLUSTER: "research", ownership.COMPONENT: component}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "labels": labels,
                     "annotations": {"kubeslurm.io/config-hash": "abc"}, "resourceVersion": "7",
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"nodeName": node, "schedulerName": "default-scheduler",
                 "containers": [{"name": "slurmd", "image": "slurm:24.11", "env": [{"name": "A", "value": "1"}],
                                 "resources": {"limits": {"cpu": "1"}}}],
                 "initContainers": [{"name": "install-config", "image": "slurm:24.11", "command": ["sh", "-c", "x" * 500]}],
                 "volumes": [{"name": "config", "configMap": {"name": "research-slurm-config"}}],
                 "tolerations": [{"key": "kubeslurm.io/bridge", "operator": "Exists"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "slurmd", "restartCount": 0, "state": {"running": {}}}]},
    }


def names(pods: list[dict] | None) -> list[str] | None:
    return None if pods is None else [p["metadata"]["name"] for p in pods]


def test_a_pod_is_kept_with_what_the_reconcile_reads_and_without_its_bulk():
    kept = kept_of(a_pod("hpc", "h100-0", node="node-1"))
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"][ownership.COMPONENT] == ownership.SLURMD
    assert kept["metadata"]["annotations"] == {"kubeslurm.io/config-hash": "abc"}
    assert kept["metadata"]["uid"] == "uid-h100-0"
    assert kept["spec"] == {"nodeName": "node-1", "schedulerName": "default-scheduler",
                            "containers": [{"name": "slurmd", "image": "slurm:24.11"}]}
    assert kept["status"] == a_pod("hpc", "h100-0")["status"]
    assert (kept["apiVersion"], kept["kind"]) == ("v1", "Pod")


@pytest.mark.parametrize("selector, labels", [
    ("a=b", {"a": "b"}),
    (SLURMD, {ownership.MANAGED_BY: ownership.MANAGER, ownership.CLUSTER: "research", ownership.COMPONENT: ownership.SLURMD}),
])
def test_equality_selectors_are_served(selector, labels):
    assert equality_selector(selector) == labels


@pytest.mark.parametrize("selector", ["a!=b", "a", "a in (b)", "a==b", "=b"])
def test_other_selectors_are_refused_not_misread(selector):
    with pytest.raises(ValueError, match="only k=v"):
        equality_selector(selector)


def test_it_answers_only_for_what_a_watch_has_listed():
    cache = PodCache()
    assert cache.pods("hpc", SLURMD) is None and not cache.answers_for("hpc")
    cache.replace("hpc", [a_pod("hpc", "h100-1"), a_pod("hpc", "h100-0"), a_pod("hpc", "research-controller-0", "controller")])
    assert names(cache.pods("hpc", SLURMD)) == ["h100-0", "h100-1"]  # by name, as the API server lists
    assert cache.answers_for("hpc") and cache.pods("other", SLURMD) is None
    assert cache.pod("hpc", "research-controller-0")["metadata"]["labels"][ownership.COMPONENT] == "controller"
    assert cache.pod("hpc", "absent") is None
    everywhere = PodCache()
    everywhere.replace(None, [a_pod("hpc", "h100-0")])
    assert names(everywhere.pods("other", SLURMD)) == [] and names(everywhere.pods("hpc", SLURMD)) == ["h100-0"]


def test_a_list_replaces_its_scope_only():
    cache = PodCache()
    cache.replace("a", [a_pod("a", "h100-0"), a_pod("a", "h100-1")])
    cache.replace("b", [a_pod("b", "h100-0")])
    cache.replace("a", [a_pod("a", "h100-1")])
    assert names(cache.pods("a", SLURMD)) == ["h100-1"] and names(cache.pods("b", SLURMD)) == ["h100-0"]
    cache.replace(None, [a_pod("c", "h100-5")])
    assert names(cache.pods("a", SLURMD)) == [] and names(cache.pods("c", SLURMD)) == ["h100-5"] and len(cache) == 1


def test_watch_events_add_change_and_forget_pods():
    cache = PodCache()
    cache.replace("hpc", [])
    cache.changed("ADDED", a_pod("hpc", "h100-0"))
    cache.changed("MODIFIED", a_pod("hpc", "h100-0", node="node-2"))
    assert cache.pod("hpc", "h100-0")["spec"]["nodeName"] == "node-2"
    # A StatefulSet's pod made again under the same name: the old one's deletion does not forget it.
    cache.changed("ADDED", a_pod("hpc", "h100-0", uid="second"))
    cache.changed("DELETED", a_pod("hpc", "h100-0", uid="uid-h100-0"))
    assert cache.pod("hpc", "h100-0")["metadata"]["uid"] == "second"
    cache.changed("DELETED", a_pod("hpc", "h100-0", uid="second"))
    assert cache.pods("hpc", SLURMD) == []


def test_the_owned_pods_watch_keeps_it_through_events_and_a_relist():
    stopped = threading.Event()
    gone = ("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})
    server = ScriptedServer(
        [([a_pod("hpc", "h100-0"), a_pod("hpc", "h100-1")], "10"), ([a_pod("hpc", "h100-1"), a_pod("hpc", "h100-2")], "30")],
        [[("DELETED", a_pod("hpc", "h100-1")), ("ADDED", a_pod("hpc", "h100-3"))], [gone]],
        stopped)
    seen: list[list[str]] = []
    cache = PodCache()
    # The handler (which wakes the reconcile) hears of a change only once the cache has it.
    FilteredWatch(server, OWNED_PODS, "hpc", lambda t, p: seen.append(names(cache.pods("hpc", SLURMD))), stopped,
                  cache=cache).run()
    assert seen[:4] == [["h100-0", "h100-1"], ["h100-0", "h100-1"], ["h100-0"], ["h100-0", "h100-3"]]
    assert names(cache.pods("hpc", SLURMD)) == ["h100-1", "h100-2"]  # the relist replaced it all


class CountingApi:
    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def list(self, kind, namespace, selector=None):
        self.calls.append(("list", namespace))
        return [a_pod(namespace, "from-the-api")]

    def get(self, kind, namespace, name):
        self.calls.append(("get", name))
        return None


def test_the_reconcile_reads_the_cache_once_it_answers_and_the_api_server_before():
    api, cache = CountingApi(), PodCache()
    reconciler = ClusterReconciler(api, slurm_for=lambda cluster, pod: None, events=None, pod_cache=cache)
    assert names(reconciler.read_pods("hpc", SLURMD)) == ["from-the-api"] and reconciler.read_pod("hpc", "x") is None
    assert api.calls == [("list", "hpc"), ("get", "x")]
    cache.replace("hpc", [a_pod("hpc", "h100-0"), a_pod("hpc", "research-controller-0", "controller")])
    assert names(reconciler.read_pods("hpc", SLURMD)) == ["h100-0"]
    assert reconciler.read_pod("hpc", "research-controller-0")["metadata"]["name"] == "research-controller-0"
    assert reconciler.read_pod("hpc", "research-backup-0") is None
    assert len(api.calls) == 2  # nothing more from the API server
