"""gres.conf: which device files are a node's GPUs."""

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.render.config.templates import render_template
from kubeslurm.render.k8s import naming


def _device_files(count: int) -> str:
    return "/dev/nvidia0" if count == 1 else f"/dev/nvidia[0-{count - 1}]"


def gres_lines(node_set: NodeSet) -> list[str]:
    gpus = node_set.spec.gpus
    if gpus is None or gpus.count == 0:
        return []
    nodes = naming.node_range(node_set.metadata.name, node_set.spec.max_replicas)
    type_part = f" Type={gpus.type}" if gpus.type else ""
    if gpus.auto_detect != "off":
        return [f"NodeName={nodes} AutoDetect={gpus.auto_detect}"]
    return [f"NodeName={nodes} AutoDetect=off Name=gpu{type_part} File={_device_files(gpus.count)}"]


def render_gres_conf(cluster: SlurmCluster, node_sets: list[NodeSet]) -> str:
    lines = [line for ns in sorted(node_sets, key=lambda ns: ns.metadata.name) for line in gres_lines(ns)]
    return render_template(
        "gres.conf.j2", namespace=cluster.metadata.namespace, cluster_name=cluster.metadata.name, lines=lines
    )
