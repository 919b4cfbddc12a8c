"""A partition naming a NodeSet not created yet, in a cluster just created: waited for, not an error.

`kubectl apply -f` of a file holding a SlurmCluster and its NodeSets creates them one after the
other, and helm or a GitOps tool may create them in separate steps: the cluster's first
reconcile can come in between. Until NEW_CLUSTER_SECONDS after the cluster's creation, such a
reconcile stops at LoadSpec with Ready False, reason WaitingForNodeSets, naming what it waits
for: no Warning Event and not Degraded (the NodeSet's creation wakes the cluster at once).
Later the reference is a mistake, which the render refuses: InvalidSpec, Degraded, a Warning.
KUBESLURM_NEW_CLUSTER_SECONDS sets how long (60 s; longer for tools that create NodeSets in a
later wave).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Collection

from ..api import SlurmCluster

NEW_CLUSTER_SECONDS = float(os.environ.get("KUBESLURM_NEW_CLUSTER_SECONDS", "60"))
WAITING_FOR_NODE_SETS = "WaitingForNodeSets"


def awaited_node_sets(cluster: SlurmCluster, existing: Collection[str], age_seconds: float) -> list[str]:
    """The NodeSets spec.partitions names that do not exist yet, while the cluster is new; else none."""
    if age_seconds >= NEW_CLUSTER_SECONDS:
        return []
    named = {name for partition in cluster.spec.partitions for name in partition.node_sets}
    return sorted(named - set(existing))


def waiting_message(cluster: SlurmCluster, awaited: list[str]) -> str:
    names = ", ".join(repr(name) for name in awaited)
    return (f"spec.partitions names NodeSet {names}, not created yet in namespace {cluster.metadata.namespace}: "
            f"waiting for it (until {NEW_CLUSTER_SECONDS:.0f} s after the cluster's creation; then it is InvalidSpec: "
            "create it or remove it from the partition)")


def age_seconds(raw: dict, now: dt.datetime | None = None) -> float:
    """Seconds since the object's creationTimestamp (RFC 3339, UTC); an object without one counts as old."""
    created = raw.get("metadata", {}).get("creationTimestamp")
    if not created:
        return float("inf")
    now = now or dt.datetime.now(dt.timezone.utc)
    return (now - dt.datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()
