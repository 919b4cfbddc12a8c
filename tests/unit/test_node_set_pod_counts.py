"""A NodeSet's replicas and readyReplicas, counted from the pods a run read (run_state.NodeSetState.count_pods)."""

import pytest

from kubeslurm.ownership import NODE_SET
from kubeslurm.reconcile.run_state import NodeSetState, Run


def pod(name: str, node_set: str = "cpu", phase: str | None = "Running", ready: bool = True, terminating: bool = False) -> dict:
    meta = {"name": name, "labels": {NODE_SET: node_set}}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-07T19:00:00Z"
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if phase:
        status["phase"] = phase
    return {"metadata": meta, "spec": {}, "status": status}


@pytest.mark.parametrize("pods, replicas, ready", [
    ([], 0, 0),  # a scale-down's last pod gone: 0 at once, whatever the StatefulSet's status says yet
    ([pod("cpu-0"), pod("cpu-1")], 2, 2),
    ([pod("cpu-0"), pod("cpu-1", ready=False)], 2, 1),
    ([pod("cpu-0", phase="Pending", ready=False)], 1, 0),
    ([pod("cpu-0", phase=None, ready=False)], 0, 0),  # just made, no phase yet: the controller does not count it either
    ([pod("cpu-0", terminating=True)], 1, 1),  # going, still there: counted, as the controller does
    ([pod("cpu-0", phase="Pending", ready=True)], 1, 0),  # Ready only while Running
])
def test_count_pods(pods, replicas, ready):
    state = NodeSetState(raw={})
    state.count_pods(pods)
    assert (state.live_replicas, state.ready_replicas) == (replicas, ready)


def test_a_node_sets_pods_are_those_of_its_label():
    run = Run(raw={}, slurmd_pods=[pod("cpu-0"), pod("gpu-0", node_set="gpu"), pod("cpu-1")])
    assert [p["metadata"]["name"] for p in run.pods_of("cpu")] == ["cpu-0", "cpu-1"]
    assert run.pods_of("none") == []
