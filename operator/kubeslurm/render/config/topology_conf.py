"""topology.conf from the Kubernetes node labels under each slurmd pod.

The operator knows which Kubernetes node every slurmd pod landed on and that
node's labels; `placements` maps Slurm node name -> those labels.
"""

import re

from kubeslurm.api import SlurmCluster
from kubeslurm.render.config.templates import render_template

UNLABELLED = "unlabelled"


_NOT_IN_A_SWITCH_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def _switch_part(value: str) -> str:
    return _NOT_IN_A_SWITCH_NAME.sub("_", value) or "_"


def _nodes_by_path(labels: list[str], placements: dict[str, dict[str, str]]) -> dict[tuple, set[str]]:
    """Nodes grouped by the switch-name parts of their label values, in label order.

    Thousands of nodes share a few distinct values: each is made a switch-name part
    once, not once per node.
    """
    by_values: dict[tuple, list[str]] = {}
    for node, node_labels in placements.items():
        by_values.setdefault(tuple([node_labels.get(label, UNLABELLED) for label in labels]), []).append(node)
    by_path: dict[tuple, set[str]] = {}
    for values, nodes in by_values.items():
        by_path.setdefault(tuple(map(_switch_part, values)), set()).update(nodes)
    return by_path


def _hostlist(nodes) -> str:
    return ",".join(sorted(nodes))


def tree_lines(labels: list[str], placements: dict[str, dict[str, str]]) -> list[str]:
    """One switch per distinct label path; parents join their children; a root joins the tops."""
    leaves = _nodes_by_path(labels, placements)
    if not leaves:
        return []

    def switch(path: tuple) -> str:
        return "s-" + "-".join(path)

    lines = [f"SwitchName={switch(path)} Nodes={_hostlist(nodes)}" for path, nodes in sorted(leaves.items())]
    level_paths = set(leaves)
    for depth in range(len(labels) - 1, 0, -1):
        parents: dict[tuple, set[str]] = {}
        for path in level_paths:
            parents.setdefault(path[:depth], set()).add(switch(path))
        lines += [f"SwitchName={switch(p)} Switches={_hostlist(children)}" for p, children in sorted(parents.items())]
        level_paths = set(parents)
    # Slurm only spans jobs across connected switches: join the top level under one root.
    if len(level_paths) > 1:
        lines.append(f"SwitchName=s-root Switches={_hostlist(switch(p) for p in level_paths)}")
    return lines


def block_lines(label: str, placements: dict[str, dict[str, str]], block_sizes: list[int] | None) -> list[str]:
    blocks = {path[0]: nodes for path, nodes in _nodes_by_path([label], placements).items()}
    lines = [f"BlockName=b-{name} Nodes={_hostlist(nodes)}" for name, nodes in sorted(blocks.items())]
    if lines and block_sizes:
        lines.append("BlockSizes=" + ",".join(str(size) for size in block_sizes))
    return lines


def render_topology_conf(cluster: SlurmCluster, placements: dict[str, dict[str, str]]) -> str | None:
    """None when the cluster declares no topology."""
    topology = cluster.spec.topology
    if topology is None:
        return None
    if topology.plugin == "tree":
        lines = tree_lines(topology.node_labels, placements)
    else:
        lines = block_lines(topology.node_labels[0], placements, topology.block_sizes)
    return render_template(
        "topology.conf.j2",
        namespace=cluster.metadata.namespace,
        cluster_name=cluster.metadata.name,
        labels=topology.node_labels,
        lines=lines,
    )
