"""Object metadata: the namespace, the labels and the owner that garbage-collects an object."""

from kubeslurm.api import API_VERSION, NodeSet, SlurmCluster


def owner_reference(owner: SlurmCluster | NodeSet) -> dict:
    """An ownerReference to a SlurmCluster or NodeSet as read from the API server.

    controller: true makes the owner the one that reconciles the object;
    blockOwnerDeletion keeps a foreground deletion of the owner waiting until it is gone.
    """
    if not owner.metadata.uid:
        raise ValueError(
            f"{owner.kind} {owner.metadata.namespace}/{owner.metadata.name} has no metadata.uid: "
            "owner references need the object as read from the API server"
        )
    return {
        "apiVersion": API_VERSION,
        "kind": owner.kind,
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(name: str, owner: SlurmCluster | NodeSet, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict:
    """metadata of an object that lives in its owner's namespace and dies with it."""
    meta = {
        "name": name,
        "namespace": owner.metadata.namespace,
        "labels": dict(labels),
        "ownerReferences": [owner_reference(owner)],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def owned_by_cluster(node_set: NodeSet, cluster: SlurmCluster) -> dict:
    """The part of a NodeSet the operator applies: an ownerReference to its cluster."""
    return {
        "apiVersion": API_VERSION,
        "kind": node_set.kind,
        "metadata": {
            "name": node_set.metadata.name,
            "namespace": node_set.metadata.namespace,
            "ownerReferences": [owner_reference(cluster)],
        },
    }
