"""cgroup.conf: whether Slurm confines jobs with cgroups inside the slurmd pod."""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.config.templates import render_template


def render_cgroup_conf(cluster: SlurmCluster) -> str:
    return render_template(
        "cgroup.conf.j2",
        namespace=cluster.metadata.namespace,
        cluster_name=cluster.metadata.name,
        constrain=cluster.spec.slurm.constrain_with_cgroups,
    )
