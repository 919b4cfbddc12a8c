"""How long a full render of a large cluster takes: 1000 nodes, 8000 GPUs, 20 NodeSets.

A full render is what one reconcile computes: validated models, every Slurm config
file and every Kubernetes object. Target: well under 50 ms.
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubeslurm.api import load_documents  # noqa: E402
from kubeslurm.render.cluster_objects import cluster_objects, node_set_objects  # noqa: E402

TARGET_MS = 50.0
NODE_SETS = 20
NODES_PER_SET = 50
GPUS_PER_NODE = 8


def big_cluster():
    node_sets = [
        {
            "apiVersion": "kubeslurm.io/v1alpha1",
            "kind": "NodeSet",
            "metadata": {"name": f"gpu{i}", "namespace": "hpc", "uid": f"00000000-0000-0000-0000-1000000000{i:02d}"},
            "spec": {
                "clusterName": "big",
                "replicas": NODES_PER_SET,
                "maxReplicas": NODES_PER_SET,
                "resources": {"cpu": "96", "memory": "1800Gi"},
                "gpus": {"count": GPUS_PER_NODE, "type": "h100"},
                "features": ["nvlink", f"rack{i}"],
            },
        }
        for i in range(NODE_SETS)
    ]
    cluster = {
        "apiVersion": "kubeslurm.io/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "big", "namespace": "hpc", "uid": "00000000-0000-0000-0000-000000000001"},
        "spec": {
            "accounts": [{"name": f"team{i}", "shares": i + 1, "users": [f"user{i}{j}" for j in range(20)]} for i in range(50)],
            "partitions": [{"name": f"p{i}", "nodeSets": [f"gpu{i}"]} for i in range(NODE_SETS)]
            + [{"name": "all", "nodeSets": [f"gpu{i}" for i in range(NODE_SETS)], "default": True}],
            "topology": {"plugin": "tree", "nodeLabels": ["zone", "switch"]},
        },
    }
    placements = {
        f"gpu{i}-{n}": {"zone": f"z{i % 4}", "switch": f"sw{i}-{n // 16}"} for i in range(NODE_SETS) for n in range(NODES_PER_SET)
    }
    return [cluster, *node_sets], placements


def main() -> int:
    documents, placements = big_cluster()
    samples = []
    for _ in range(50):
        start = time.perf_counter()
        manifests = load_documents(documents)
        cluster = manifests.clusters[0]
        node_sets = manifests.node_sets_of(cluster)
        objects = cluster_objects(cluster, node_sets, database_password="benchmark", placements=placements)
        for node_set in node_sets:
            objects += node_set_objects(cluster, node_set)
        samples.append((time.perf_counter() - start) * 1000)
    nodes = NODE_SETS * NODES_PER_SET
    median = statistics.median(samples)
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    size = sum(map(len, config["data"].values()))
    print(f"render: {nodes} nodes, {nodes * GPUS_PER_NODE} GPUs, {len(objects)} objects, config files {size} bytes")
    print(f"render: median {median:.2f} ms, p90 {statistics.quantiles(samples, n=10)[-1]:.2f} ms (target < {TARGET_MS} ms)")
    return 0 if median < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
