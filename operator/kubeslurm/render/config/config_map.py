"""The ConfigMap with the cluster's Slurm config files (slurm.conf, gres.conf, ...).

Only slurmctld mounts it: slurmd and sackd fetch the same files from slurmctld
(configless), so changing it never restarts a pod that runs jobs.
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta


def slurm_config_map(cluster: SlurmCluster, files: dict[str, str]) -> dict:
    name = cluster.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(naming.config_map(name), cluster, labels.object_labels(name, labels.CONTROLLER)),
        "data": dict(sorted(files.items())),
    }
