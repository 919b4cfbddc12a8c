"""Bridged NodeSets on real Slurm 24.11 (NodeSet spec.bridged, render/bridge/bridged_nodes.py).

A cluster with the bridge on and two NodeSets in one partition: `bridged` (spec.bridged, its
nodes on the Kubernetes nodes dedicated to the bridge) and `plain`. The rendered slurmd --conf
lines register the bridged node with the feature kubeslurm_bridged and the plain one without.
A placeholder job submitted as the operator submits it once the cluster has a bridged NodeSet
(`--constraint=kubeslurm_bridged`) runs on the bridged node only: while that node is full, the
next such job waits although the plain node is idle, and a job without the constraint (what
the operator submits when no NodeSet is bridged) takes the plain node.
"""

from __future__ import annotations

import uuid

import pytest

from kubeslurm.api.bridge import BRIDGED_FEATURE
from kubeslurm.render.bridge.bridged_nodes import bridged_nodes_only
from kubeslurm.render.bridge.placeholder_job import PlaceholderRequest, sbatch_argv
from testbed.waiting import wait_for
from tests.slurm.conftest import running_with_accounts

from .test_scheduling_policies import Policies

pytestmark = pytest.mark.slurm

CLUSTER = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
    "metadata": {"name": "bridged", "namespace": "hpc"},
    "spec": {
        "accounting": {"enabled": True},
        "accounts": [{"name": "serving", "users": ["svc-serving"]}],
        "partitions": [{"name": "gpu", "nodeSets": ["bridged", "plain"], "default": True}],
        "bridge": {"enabled": True, "namespaces": [
            {"namespace": "inference", "account": "serving", "user": "svc-serving", "partition": "gpu"},
        ]},
    },
}


def _node_set(name: str, bridged: bool) -> dict:
    return {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": name, "namespace": "hpc"},
            "spec": {"clusterName": "bridged", "replicas": 1, "bridged": bridged,
                     "resources": {"cpu": "2", "memory": "2Gi"}, "gpus": {"count": 2}}}


NODE_SETS = [_node_set("bridged", True), _node_set("plain", False)]
BRIDGED_NODE, PLAIN_NODE = "bridged-0", "plain-0"


@pytest.fixture(scope="module")
def bridged_cluster(slurm_rootfs, request):
    with running_with_accounts(slurm_rootfs, request, [CLUSTER, *NODE_SETS], "bridged") as (model, node_sets, cluster, control):
        yield model, node_sets, cluster, control


def _request(model, node_sets, *, cpus: int, constrained: bool | None = None) -> PlaceholderRequest:
    (mapping,) = model.spec.bridge.namespaces
    only = bridged_nodes_only(node_sets.values()) if constrained is None else constrained
    return PlaceholderRequest(
        namespace=mapping.namespace, pod_name=f"server-{uuid.uuid4().hex[:6]}", pod_uid=str(uuid.uuid4()),
        account=mapping.account, user=mapping.user, partition=mapping.partition,
        cpus=cpus, memory_mib=256, bridged_nodes_only=only)


def _features(cluster, node: str) -> set[str]:
    out = cluster.run(cluster.controller, ["sinfo", "-h", "-N", "-n", node, "-o", "%f"]).stdout
    return set(out.strip().split(","))


def test_only_the_bridged_node_set_s_nodes_register_the_bridged_feature(bridged_cluster):
    _model, _node_sets, cluster, _control = bridged_cluster
    assert _features(cluster, BRIDGED_NODE) == {"bridged", BRIDGED_FEATURE}
    assert _features(cluster, PLAIN_NODE) == {"plain"}


def test_a_constrained_placeholder_runs_on_the_bridged_node_and_never_on_the_other(bridged_cluster):
    model, node_sets, cluster, control = bridged_cluster
    p = Policies(cluster)
    jobs = []
    try:
        first = _request(model, node_sets, cpus=2)  # the whole bridged node
        assert first.bridged_nodes_only and f"--constraint={BRIDGED_FEATURE}" in sbatch_argv(first)
        jobs.append(control.submit_placeholder(first))
        wait_for(lambda: control.job_allocation(jobs[0]).state == "RUNNING", 60, f"placeholder {jobs[0]} running")
        assert list(control.job_allocation(jobs[0]).nodes) == [BRIDGED_NODE]
        assert p.field(jobs[0], "Features") == BRIDGED_FEATURE

        # The bridged node is full: the next bridged pod's job waits, the plain node idle beside it.
        jobs.append(control.submit_placeholder(_request(model, node_sets, cpus=1)))
        p.wait_reason(jobs[1], "Resources")
        assert p.idle([PLAIN_NODE])
        assert control.job_allocation(jobs[1]).state == "PENDING"

        # Without the constraint (a cluster with no bridged NodeSet) the plain node takes it.
        jobs.append(control.submit_placeholder(_request(model, node_sets, cpus=1, constrained=False)))
        wait_for(lambda: control.job_allocation(jobs[2]).state == "RUNNING", 60, f"placeholder {jobs[2]} running")
        assert list(control.job_allocation(jobs[2]).nodes) == [PLAIN_NODE]
        assert control.job_allocation(jobs[1]).state == "PENDING"

        # Once the bridged node is free, the waiting one starts there.
        control.cancel_placeholder(jobs[0])
        wait_for(lambda: control.job_allocation(jobs[1]).state == "RUNNING", 60, f"placeholder {jobs[1]} running")
        assert list(control.job_allocation(jobs[1]).nodes) == [BRIDGED_NODE]
    finally:  # no hold file was written: the Epilog lets them go at once
        for job in jobs:
            cluster.run(cluster.controller, ["scancel", job], check=False)
