"""How long a full render of a large cluster takes, at 1000 and at 5000 nodes.

A full render is what one reconcile computes: validated models, every Slurm config
file and every Kubernetes object. Every size has 8 GPUs per node and 50 accounts of
20 users, and topology.conf places every node.

The 5000-node cluster is measured twice: once with 5x the replicas of the 1000-node
one, once with 5x the NodeSets. Render work should follow the NodeSets and the size
of the config files (topology.conf lists every node), not replicas x users: the first
should cost little more than 1000 nodes, the second about 5x.

Exits 1 only when a median misses its target; with --json it prints the figures for
`make bench`'s table (benchmarks/run_all.py) and exits 0 whatever they are.
"""

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.figures import Figure, dump  # noqa: E402
from kubeslurm.api import load_documents  # noqa: E402
from kubeslurm.render.cluster_objects import desired_objects  # noqa: E402
from kubeslurm.render.k8s.config_hash import config_hash_key  # noqa: E402
from kubeslurm.render.unix_ids import assign_unix_ids  # noqa: E402

GPUS_PER_NODE = 8
ACCOUNTS = 50
USERS_PER_ACCOUNT = 20
PARTITIONS = 20


@dataclass(frozen=True)
class Size:
    node_sets: int
    replicas: int
    target_ms: float
    samples: int

    @property
    def nodes(self) -> int:
        return self.node_sets * self.replicas


SIZES = (
    Size(node_sets=20, replicas=50, target_ms=10.0, samples=50),
    Size(node_sets=20, replicas=250, target_ms=50.0, samples=20),
    Size(node_sets=100, replicas=50, target_ms=50.0, samples=20),
)


def big_cluster(node_sets: int = 20, replicas: int = 50) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """The manifests of a cluster of node_sets x replicas GPU nodes, and where its nodes run."""
    node_set_documents = [
        {
            "apiVersion": "kubeslurm.io/v1alpha1",
            "kind": "NodeSet",
            "metadata": {"name": f"gpu{i}", "namespace": "hpc", "uid": f"00000000-0000-0000-0000-1{i:011d}"},
            "spec": {
                "clusterName": "big",
                "replicas": replicas,
                "maxReplicas": replicas,
                "resources": {"cpu": "96", "memory": "1800Gi"},
                "gpus": {"count": GPUS_PER_NODE, "type": "h100"},
                "features": ["nvlink", f"rack{i}"],
            },
        }
        for i in range(node_sets)
    ]
    cluster = {
        "apiVersion": "kubeslurm.io/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "big", "namespace": "hpc", "uid": "00000000-0000-0000-0000-000000000001"},
        "spec": {
            "accounts": [
                {"name": f"team{i}", "shares": i + 1, "users": [f"user{i}{j}" for j in range(USERS_PER_ACCOUNT)]}
                for i in range(ACCOUNTS)
            ],
            # NodeSet i is in partition i mod PARTITIONS (the API allows 64 partitions of 64 NodeSets).
            "partitions": [
                {"name": f"p{p}", "nodeSets": [f"gpu{i}" for i in range(p, node_sets, PARTITIONS)], "default": p == 0}
                for p in range(min(PARTITIONS, node_sets))
            ],
            "topology": {"plugin": "tree", "nodeLabels": ["zone", "switch"]},
        },
    }
    placements = {
        f"gpu{i}-{n}": {"zone": f"z{i % 4}", "switch": f"sw{i}-{n // 16}"} for i in range(node_sets) for n in range(replicas)
    }
    return [cluster, *node_set_documents], placements


def recorded_unix_ids(documents: list[dict]) -> dict[str, int]:
    """The uid table a reconcile reads from status.unixIds: every user of the spec, and 200 who left it."""
    users = [user for account in documents[0]["spec"]["accounts"] for user in account["users"]]
    return assign_unix_ids([*users, *(f"gone{i}" for i in range(200))])


def full_render(documents: list[dict], placements: dict[str, dict[str, str]], unix_ids: dict[str, int] | None = None) -> list[dict]:
    """What one reconcile computes from the manifests: the models, then every object."""
    manifests = load_documents(documents)
    cluster = manifests.clusters[0]
    node_sets = manifests.node_sets_of(cluster)
    return desired_objects(
        cluster, node_sets, database_password="benchmark", config_hash_key=config_hash_key(b"benchmark"),
        placements=placements, unix_ids=unix_ids,
    )


def render_times_ms(size: Size) -> tuple[list[float], list[dict]]:
    documents, placements = big_cluster(size.node_sets, size.replicas)
    unix_ids = recorded_unix_ids(documents)
    samples = []
    for _ in range(size.samples):
        start = time.perf_counter()
        objects = full_render(documents, placements, unix_ids)
        samples.append((time.perf_counter() - start) * 1000)
    return samples, objects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render cost of large clusters (make bench-render).")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout (for run_all.py)")
    as_json = parser.parse_args(argv).json
    out = sys.stderr if as_json else sys.stdout  # with --json, stdout carries the figures alone
    # The first render of a process also compiles the templates and derives the users'
    # uids, which later renders of the same cluster reuse: shown, but not in the medians.
    documents, placements = big_cluster(SIZES[0].node_sets, SIZES[0].replicas)
    start = time.perf_counter()
    full_render(documents, placements)
    print(f"render: first render of this process (1000 nodes, templates compiled, uids derived): "
          f"{(time.perf_counter() - start) * 1000:.1f} ms", file=out)
    print(f"render: {ACCOUNTS} accounts x {USERS_PER_ACCOUNT} users with their recorded uids (and 200 departed users'), "
          f"{GPUS_PER_NODE} GPUs per node, topology tree", file=out)
    header = (f"{'nodes':>6} {'NodeSets':>8} {'replicas':>8} {'GPUs':>6} {'objects':>7} {'config B':>9} "
              f"{'median ms':>9} {'p90 ms':>7} {'target ms':>9}  met")
    print(header, file=out)
    missed = []
    figures = []
    for size in SIZES:
        samples, objects = render_times_ms(size)
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        config = next(o for o in objects if o["kind"] == "ConfigMap")
        config_bytes = sum(map(len, config["data"].values()))
        met = median <= size.target_ms
        if not met:
            missed.append(size)
        print(f"{size.nodes:>6} {size.node_sets:>8} {size.replicas:>8} {size.nodes * GPUS_PER_NODE:>6} {len(objects):>7} "
              f"{config_bytes:>9} {median:>9.2f} {p90:>7.2f} {size.target_ms:>9.1f}  {'yes' if met else 'NO'}",
              file=out)
        figures.append(Figure(
            f"render {size.nodes} nodes ({size.node_sets} NodeSets x {size.replicas}), median",
            f"<= {size.target_ms:.0f} ms", f"{median:.1f} ms", met=met))
    if as_json:
        print(dump(figures))
        return 0
    if missed:
        print(f"render: {len(missed)} of {len(SIZES)} medians over target", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
