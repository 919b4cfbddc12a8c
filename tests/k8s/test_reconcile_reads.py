"""A no-op reconcile reads as much with 100 slurmd pods as with 10: one list per kind, never
a read per pod or per node, and no pod read at all (the owned pods' watch keeps them) (issue 16). Counted by the API server (its audit log holds every
get and list, by user), not timed: the speed itself is benchmarks/scale_bench.py's.

The pods stay Pending in this tier (no kubelet), which changes nothing the reads depend on.
"""

import time

import pytest
import yaml

from testbed.control_plane.audit import per_cycle
from testbed.waiting import wait_for

from .operator_process import OPERATOR_USER
from .test_operator import crds_installed, operator  # noqa: F401 (fixtures)

pytestmark = pytest.mark.k8s


def cluster(namespace: str, replicas: int) -> list[dict]:
    return [
        {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "reads", "namespace": namespace},
         "spec": {"accounting": {"enabled": False}, "login": {"replicas": 0, "ssh": {"enabled": False}},
                  "partitions": [{"name": "all", "nodeSets": ["cpu"], "default": True}]}},
        {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": "cpu", "namespace": namespace},
         "spec": {"clusterName": "reads", "replicas": replicas, "maxReplicas": 100,
                  "resources": {"cpu": "1", "memory": "1Gi"}}},
    ]


def test_a_no_op_reconcile_reads_as_much_with_100_slurmd_pods_as_with_10(operator, control_plane, namespace):  # noqa: F811
    cp = control_plane

    def pods() -> int:
        out = cp.kubectl("get", "pods", "-n", namespace, "-l", "kubeslurm.io/nodeset=cpu", "-o", "name").stdout
        return len(out.split())

    def reads_per_reconcile() -> tuple[float, dict[str, float]]:
        def quiet():  # the operator has caught up: it writes nothing any more
            mark = cp.audit_mark()
            time.sleep(operator.resync_seconds + 1)  # a reconcile runs at least every resync_seconds
            return not [w for w in cp.audit_writes(since=mark, user=OPERATOR_USER) if f"/namespaces/{namespace}/" in w["requestURI"]]

        wait_for(quiet, 90, "the operator to stop writing", interval=0)
        mark = cp.audit_mark()
        time.sleep(3 * operator.resync_seconds + 2)
        reads = [r for r in cp.audit.reads(since=mark, user=OPERATOR_USER) if f"/namespaces/{namespace}/" in r["requestURI"]]
        # A reconcile begins by reading its SlurmCluster (ClusterReconciler.reconcile).
        return per_cycle(reads, lambda r: r["verb"] == "get" and r["requestURI"].endswith("/slurmclusters/reads"))

    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(cluster(namespace, 10)))
    wait_for(lambda: pods() == 10, 60, "10 slurmd pods")
    at_10, kinds_10 = reads_per_reconcile()

    cp.kubectl("scale", "nodeset", "cpu", "-n", namespace, "--replicas=100")
    wait_for(lambda: pods() == 100, 90, "100 slurmd pods")
    at_100, kinds_100 = reads_per_reconcile()

    print(f"reads per no-op reconcile: {at_10:.1f} with 10 pods {kinds_10}, {at_100:.1f} with 100 pods {kinds_100}")
    assert at_10 > 0 and at_100 == pytest.approx(at_10), f"{kinds_10} vs {kinds_100}"
    # the same reads kind by kind; the slurmd and controller pods are not read at all: the
    # operator's own pod watch keeps them (reconcile/pod_cache.py), listed once when it started
    assert kinds_100 == pytest.approx(kinds_10)
    assert "list pods" not in kinds_100 and "get pods" not in kinds_100, kinds_100
