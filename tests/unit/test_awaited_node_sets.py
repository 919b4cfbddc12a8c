"""A partition naming a NodeSet not created yet: waited for while the cluster is new, then
InvalidSpec (reconcile/awaited_node_sets.py); how the cluster's status says each."""

import datetime as dt

import pytest

from kubeslurm.reconcile.awaited_node_sets import (
    NEW_CLUSTER_SECONDS,
    WAITING_FOR_NODE_SETS,
    age_seconds,
    awaited_node_sets,
    waiting_message,
)
from kubeslurm.reconcile.run_state import Run, StepFailed
from kubeslurm.reconcile.status import cluster_status

from .manifests import contract_documents, load_with_uids

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()  # partitions name NodeSets h100 and cpu


@pytest.mark.parametrize("existing, age, awaited", [
    (["h100", "cpu"], 0.0, []),  # everything there
    (["h100"], 0.5, ["cpu"]),  # `kubectl apply -f`: the cluster first, its NodeSets right after
    ([], 10.0, ["cpu", "h100"]),
    (["h100", "other"], NEW_CLUSTER_SECONDS - 0.1, ["cpu"]),  # a NodeSet no partition names changes nothing
    (["h100"], NEW_CLUSTER_SECONDS, []),  # no longer new: the render's InvalidSpec says it
    ([], float("inf"), []),
])
def test_node_sets_awaited_only_while_the_cluster_is_new(existing, age, awaited):
    cluster, _ = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    assert awaited_node_sets(cluster, existing, age) == awaited


def test_age_from_the_creation_timestamp():
    now = dt.datetime(2026, 12, 6, 20, 0, 30, tzinfo=dt.timezone.utc)
    assert age_seconds({"metadata": {"creationTimestamp": "2026-12-06T20:00:00Z"}}, now) == 30.0
    assert age_seconds({"metadata": {}}, now) == float("inf")  # no timestamp: not treated as new


def test_status_while_waiting_is_ready_false_with_the_reason_and_not_degraded():
    cluster, _ = load_with_uids(CLUSTER, GPU_NODES)
    raw = {"metadata": {"name": cluster.metadata.name, "namespace": cluster.metadata.namespace, "generation": 1}}
    message = waiting_message(cluster, ["cpu"])
    assert "'cpu'" in message and f"namespace {cluster.metadata.namespace}" in message
    assert "create it or remove it from the partition" in message

    waiting = cluster_status(Run(raw=raw, cluster=cluster),
                             StepFailed("LoadSpec", WAITING_FOR_NODE_SETS, message, waiting=True), {}).to_wire()
    conditions = {c["type"]: c for c in waiting["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == WAITING_FOR_NODE_SETS and conditions["Ready"]["message"] == message
    assert conditions.get("Degraded", {}).get("status") != "True"

    failed = cluster_status(Run(raw=raw, cluster=cluster), StepFailed("Render", "InvalidSpec", "bad"), {}).to_wire()
    conditions = {c["type"]: c for c in failed["conditions"]}
    assert conditions["Ready"]["reason"] == "ReconcileFailed"
    assert conditions["Degraded"]["status"] == "True" and conditions["Degraded"]["reason"] == "InvalidSpec"
