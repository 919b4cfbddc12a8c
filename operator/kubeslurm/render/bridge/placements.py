"""The placement record: which GPU indices Slurm gave each bound pod, written only by the operator.

The kubeslurm device plugin (docs/design/slurm-scheduled-pods.md, slice 4) hands a pod the
device files of these indices and nothing else. Pod annotations could say the same, but pod
authors write those; this record is a ConfigMap of the cluster's namespace that only the
operator writes, one key per pod UID, so nobody can claim GPUs by annotating a pod.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class Placement:
    pod_uid: str
    namespace: str
    name: str
    kubernetes_node: str
    job_id: str
    gpu_indices: tuple[int, ...]


def placements_config_map_name(cluster_name: str) -> str:
    return f"{cluster_name}-bridge-placements"


def placement_data(placements: list[Placement]) -> dict[str, str]:
    """ConfigMap data: pod UID -> the placement as JSON (sorted keys: equal records, equal bytes)."""
    return {
        p.pod_uid: json.dumps({"namespace": p.namespace, "name": p.name, "node": p.kubernetes_node,
                               "job": p.job_id, "gpus": list(p.gpu_indices)}, sort_keys=True)
        for p in sorted(placements, key=lambda p: p.pod_uid)
    }


def read_placements(data: dict[str, str] | None) -> list[Placement]:
    """The record back; an entry that does not parse is skipped (it places nothing)."""
    placements = []
    for uid, text in (data or {}).items():
        try:
            entry = json.loads(text)
            gpus = tuple(int(i) for i in entry["gpus"])
            placement = Placement(uid, str(entry["namespace"]), str(entry["name"]), str(entry["node"]),
                                  str(entry["job"]), gpus)
        except (ValueError, KeyError, TypeError):
            continue
        if _UID.match(uid) and all(i >= 0 for i in gpus):
            placements.append(placement)
    return placements


def placements_config_map(cluster, data: dict[str, str]) -> dict:
    """The record as applied (server-side, one field manager: a key left out is removed).

    Owned by the SlurmCluster, and without the labels of the cluster's other objects: those
    are pruned when not in desired_objects, and this one is written by the bridge's pass."""
    from kubeslurm.render.k8s.metadata import owner_reference

    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": placements_config_map_name(cluster.metadata.name), "namespace": cluster.metadata.namespace,
                     "ownerReferences": [owner_reference(cluster)]},
        "data": dict(sorted(data.items())),
    }
