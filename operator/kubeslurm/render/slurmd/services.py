"""A NodeSet's headless Service: its slurmd pods' DNS names."""

from kubeslurm.api import NodeSet
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.services import headless_service


def node_set_service(node_set: NodeSet) -> dict:
    # Not-ready addresses are published: a slurmd must be reachable by name while it
    # registers, before its readiness probe can pass.
    return headless_service(
        naming.node_set_service(node_set.metadata.name), node_set, node_set.spec.cluster_name, labels.SLURMD,
        [("slurmd", naming.SLURMD_PORT)], publish_not_ready=True, node_set=node_set.metadata.name,
    )
