"""The PVC holding slurmctld's StateSaveLocation: the queue and running jobs survive restarts.

A standalone claim rather than a volumeClaimTemplate: with `controller.backup` both
slurmctld pods must share one StateSaveLocation (a template would give each its own,
and the backup would take over with an empty queue). So the claim is ReadWriteMany
with a backup and ReadWriteOnce without. Access modes are immutable: turning backup
on or off for an existing cluster needs a new claim. Its owner is the SlurmCluster,
so deleting the cluster deletes its job state with it.
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta
from kubeslurm.render.k8s.statefulset import persistent_volume_claim_spec


def controller_state_claim(cluster: SlurmCluster) -> dict:
    controller = cluster.spec.controller
    name = cluster.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(naming.controller_state_claim(name), cluster, labels.object_labels(name, labels.CONTROLLER)),
        "spec": persistent_volume_claim_spec(
            controller.persistence.size,
            controller.persistence.storage_class_name,
            "ReadWriteMany" if controller.backup else "ReadWriteOnce",
        ),
    }
