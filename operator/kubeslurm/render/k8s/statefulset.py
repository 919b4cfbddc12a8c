"""The StatefulSet around a pod template: stable pod names (= Slurm host names) and claims."""

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.render.k8s.metadata import object_meta


def stateful_set(
    *,
    name: str,
    owner: SlurmCluster | NodeSet,
    object_labels: dict[str, str],
    selector: dict[str, str],
    service_name: str,
    replicas: int,
    template: dict,
    update_strategy: str = "RollingUpdate",
    volume_claim_templates: list[dict] | None = None,
) -> dict:
    # Parallel: no Slurm daemon needs its lower ordinals first, and OrderedReady would
    # keep pod 1 (the backup slurmctld, or slurm node h100-1) from starting while pod 0 is broken.
    spec: dict = {
        "replicas": replicas,
        "serviceName": service_name,
        "podManagementPolicy": "Parallel",
        "updateStrategy": {"type": update_strategy},
        "selector": {"matchLabels": dict(selector)},
        "template": template,
    }
    if volume_claim_templates:
        spec["volumeClaimTemplates"] = volume_claim_templates
        # The StatefulSet never deletes its claims: a spec edit that removes the StatefulSet
        # (accounting turned off, the database moved outside) must not take the data with
        # it. Render gives each claim its own object owned by the SlurmCluster, so only
        # deleting the cluster removes the data.
        spec["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Retain", "whenScaled": "Retain"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": object_meta(name, owner, object_labels),
        "spec": spec,
    }


def persistent_volume_claim_spec(size: str, storage_class_name: str | None, access_mode: str) -> dict:
    spec: dict = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class_name:
        spec["storageClassName"] = storage_class_name
    return spec
