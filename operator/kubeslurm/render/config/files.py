"""Every Slurm config file of one cluster, as the ConfigMap will hold them."""

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.render.config.cgroup_conf import render_cgroup_conf
from kubeslurm.render.config.gres_conf import render_gres_conf
from kubeslurm.render.config.slurm_conf import render_slurm_conf
from kubeslurm.render.config.topology_conf import render_topology_conf


def render_config_files(
    cluster: SlurmCluster,
    node_sets: list[NodeSet],
    placements: dict[str, dict[str, str]] | None = None,
) -> dict[str, str]:
    """File name -> content for the cluster's ConfigMap (slurmdbd.conf is separate: it holds a password)."""
    files = {
        "slurm.conf": render_slurm_conf(cluster, node_sets),
        "gres.conf": render_gres_conf(cluster, node_sets),
        "cgroup.conf": render_cgroup_conf(cluster),
    }
    topology = render_topology_conf(cluster, placements or {})
    if topology is not None:
        files["topology.conf"] = topology
    return files
