"""What a slurmd pod registers as (`slurmd -Z --conf '...'`): the pod's share, not the host's."""

from kubeslurm.api import NodeSet
from kubeslurm.api.bridge import BRIDGED_FEATURE
from kubeslurm.render.config.slurm_conf import slurmd_real_memory


def gres_string(node_set: NodeSet) -> str | None:
    gpus = node_set.spec.gpus
    if gpus is None or gpus.count == 0:
        return None
    return f"gpu:{gpus.type}:{gpus.count}" if gpus.type else f"gpu:{gpus.count}"


def slurmd_conf_line(node_set: NodeSet) -> str:
    """The --conf argument of a dynamic node. Feature=<nodeset> puts it in its NodeSet's partitions;
    a bridged NodeSet's nodes also carry BRIDGED_FEATURE, which bridged pods' jobs ask for."""
    features = [node_set.metadata.name, *node_set.spec.features]
    if node_set.spec.bridged:
        features.append(BRIDGED_FEATURE)
    parts = [
        f"CPUs={node_set.spec.resources.cpus}",
        f"RealMemory={slurmd_real_memory(node_set)}",
        f"Features={','.join(features)}",
    ]
    gres = gres_string(node_set)
    if gres:
        parts.append(f"Gres={gres}")
    return " ".join(parts)
