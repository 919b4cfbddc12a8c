"""Where a bridged NodeSet's slurmd pods run, and what they ask Kubernetes for (NodeSet spec.bridged).

The admin dedicates Kubernetes nodes to a cluster's bridge: label and taint
`kubeslurm.io/bridge=<cluster>` (NoSchedule). The slurmd pods of a bridged NodeSet select that
label and tolerate that taint, and so does the device plugin DaemonSet; the default scheduler
places nothing else there. On those nodes Slurm, not the kubelet, hands out the CPUs, memory
and GPUs, to batch jobs (inside the slurmd pod) and to bridged pods (bound by the operator)
alike. So a bridged slurmd pod *requests* only what slurmd itself needs: the kubelet admits a
bridged pod only if every pod's requests fit the node, and the node's share that Slurm gives to
that pod must not be counted twice. Its *limits* stay spec.resources and every GPU, so a job in
the slurmd pod can use no more than Slurm registered, and the GPUs stay out of anyone else's
reach through their Kubernetes resource.

The operator never labels, taints or otherwise changes a Node: nothing of a deleted cluster
stays behind on one.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.api.quantity import parse_quantity

BRIDGE_NODE_KEY = "kubeslurm.io/bridge"
# slurmd, its health check and the job steps' bookkeeping outside the jobs' own cgroups.
SLURMD_OVERHEAD_REQUESTS = {"cpu": "250m", "memory": "256Mi"}


def bridged_node_selector(cluster: str) -> dict[str, str]:
    """The label of the Kubernetes nodes dedicated to this cluster's bridge."""
    return {BRIDGE_NODE_KEY: cluster}


def bridged_toleration(cluster: str) -> dict[str, str]:
    """The taint those nodes carry, which keeps every other pod off them."""
    return {"key": BRIDGE_NODE_KEY, "operator": "Equal", "value": cluster, "effect": "NoSchedule"}


def bridged_node_set_problem(cluster: SlurmCluster, node_set: NodeSet) -> str | None:
    """Why the NodeSet cannot be rendered as it is (reported as InvalidSpec), or None."""
    if node_set.spec.bridged and not cluster.spec.bridge.enabled:
        return (f"spec.bridged is true but SlurmCluster {cluster.metadata.name} has spec.bridge.enabled off: "
                f"turn the bridge on there (with its namespaces), or set spec.bridged to false")
    return None


# What a bridged NodeSet registers with Slurm, against what a dedicated node has: slurmd's pod
# requests only its overhead there, so the kubelet's admission no longer stops a NodeSet bigger
# than its node; Slurm would then place jobs and bridged pods on CPUs, memory and GPUs the node
# does not have, and the kubelet refuse the pods it binds there (OutOfcpu).
NO_BRIDGED_NODES = "NoBridgedNodes"
BRIDGED_NODES_TOO_SMALL = "BridgedNodesTooSmall"


def bridged_nodes_problem(cluster: str, node_set: NodeSet, nodes: Iterable[dict]) -> tuple[str, str] | None:
    """(reason, message) of the NodeSet's Degraded condition when the Kubernetes nodes dedicated
    to the cluster's bridge cannot hold its slurmd pods (none dedicated, or some too small); or None."""
    dedicated = sorted((n for n in nodes if (n["metadata"].get("labels") or {}).get(BRIDGE_NODE_KEY) == cluster),
                       key=lambda n: n["metadata"]["name"])
    if not dedicated:
        return NO_BRIDGED_NODES, (f"spec.bridged: no Kubernetes node is labelled {BRIDGE_NODE_KEY}={cluster}; label and taint the nodes "
                f"for this NodeSet: kubectl label node NODE {BRIDGE_NODE_KEY}={cluster} and kubectl taint node NODE "
                f"{BRIDGE_NODE_KEY}={cluster}:NoSchedule")
    wanted = {"cpu": ("spec.resources.cpu", node_set.spec.resources.cpu),
              "memory": ("spec.resources.memory", node_set.spec.resources.memory)}
    if node_set.spec.gpus is not None and node_set.spec.gpus.count > 0:
        wanted[node_set.spec.gpus.resource_name] = ("spec.gpus.count", node_set.spec.gpus.count)
    short = []
    for node in dedicated:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource, (field, amount) in wanted.items():
            has = parse_quantity(allocatable.get(resource, 0))
            if parse_quantity(amount) > has:
                short.append(f"node {node['metadata']['name']} has {resource} {allocatable.get(resource, 0)} allocatable, "
                             f"{field} asks for {amount}")
    if not short:
        return None
    return BRIDGED_NODES_TOO_SMALL, (f"{'; '.join(short)}: Slurm would hand out more than the node has; lower the NodeSet's resources "
            f"or take the label {BRIDGE_NODE_KEY}={cluster} off the smaller nodes")


def place_on_bridged_nodes(pod_spec: dict, cluster: str) -> None:
    """Select and tolerate the cluster's bridged nodes, over whatever the spec or podTemplate said."""
    pod_spec.setdefault("nodeSelector", {}).update(bridged_node_selector(cluster))
    tolerations = pod_spec.setdefault("tolerations", [])
    if bridged_toleration(cluster) not in tolerations:
        tolerations.append(bridged_toleration(cluster))


def bridged_slurmd_requests(resources: dict) -> dict:
    """A slurmd container's resources on a bridged node: cpu and memory requests at slurmd's
    overhead (never above the limit: a request above its limit is refused by the API server),
    everything else, the limits and every GPU, unchanged."""
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    for name, overhead in SLURMD_OVERHEAD_REQUESTS.items():
        limit = limits.get(name)
        requests[name] = limit if limit is not None and parse_quantity(limit) < parse_quantity(overhead) else overhead
    return {**resources, "requests": requests, "limits": limits}


def bridged_nodes_only(node_sets: Iterable[NodeSet]) -> bool:
    """Whether bridged pods' jobs must ask for the bridged feature: once the cluster has a bridged
    NodeSet, only its nodes may take them (the others' Kubernetes nodes are not dedicated)."""
    return any(node_set.spec.bridged for node_set in node_sets)
