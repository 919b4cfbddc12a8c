"""What only the operator can check about spec.storage before anything mounts it.

The CRD refuses bad paths and overlaps within spec.storage at `kubectl apply`. Two
things need other objects: a claim the site names (existingClaim) must exist and be
mountable by many pods on many nodes (ReadWriteMany, or ReadOnlyMany for a read-only
volume: a ReadWriteOnce claim would hold every pod but those of its first node in
ContainerCreating), and a NodeSet's own podTemplate mounts must not shadow the cluster's
shared paths. A bad claim stops the reconcile before anything is applied (a cluster
half rolled onto a claim that cannot be mounted is worse than one left as it was); a
NodeSet whose mounts collide is invalid alone and its pods keep running as they are.
"""

from ..api import NodeSet, SlurmCluster
from ..api.mount_paths import paths_overlap

READ_WRITE_MANY = "ReadWriteMany"
READ_ONLY_MANY = "ReadOnlyMany"


def named_claims(cluster: SlurmCluster) -> list[tuple[str, str, bool]]:
    """(field, claim name, read only) of every existing claim spec.storage names."""
    storage = cluster.spec.storage
    named = []
    if storage.home is not None and storage.home.existing_claim is not None:
        named.append(("spec.storage.home.existingClaim.name", storage.home.existing_claim.name, False))
    for index, volume in enumerate(storage.volumes):
        if volume.existing_claim is not None:
            named.append((f"spec.storage.volumes[{index}].existingClaim.name", volume.existing_claim.name, volume.read_only))
    return named


def claim_problems(cluster: SlurmCluster, claims: dict[str, dict | None]) -> list[str]:
    """Why the named claims cannot be mounted; `claims`: claim name -> the live claim or None."""
    namespace = cluster.metadata.namespace
    problems = []
    for field, name, read_only in named_claims(cluster):
        claim = claims.get(name)
        if claim is None:
            problems.append(
                f"{field}: PersistentVolumeClaim {namespace}/{name} does not exist: create it "
                f"({READ_WRITE_MANY}) or name one that does"
            )
            continue
        if claim["metadata"].get("deletionTimestamp"):
            problems.append(f"{field}: PersistentVolumeClaim {namespace}/{name} is being deleted: name another claim")
            continue
        modes = set(claim.get("spec", {}).get("accessModes") or [])
        usable = {READ_WRITE_MANY, READ_ONLY_MANY} if read_only else {READ_WRITE_MANY}
        if not modes & usable:
            wanted = f"{READ_WRITE_MANY} or {READ_ONLY_MANY}" if read_only else READ_WRITE_MANY
            problems.append(
                f"{field}: PersistentVolumeClaim {namespace}/{name} has access modes {sorted(modes) or 'none'}, but every "
                f"login and slurmd pod mounts it, on many nodes: give it {wanted} (a new claim: access modes cannot change)"
            )
    return problems


def node_set_mount_conflict(cluster: SlurmCluster, node_set: NodeSet) -> str | None:
    """Why the NodeSet's podTemplate mounts would shadow a shared path of its cluster, or None."""
    template = node_set.spec.pod_template
    if template is None or template.spec is None or not template.spec.containers:
        return None
    shared = cluster.spec.storage.mount_paths()
    for c_index, container in enumerate(template.spec.containers):
        for m_index, mount in enumerate(container.volume_mounts or []):
            for field, path in shared:
                if paths_overlap(mount.mount_path, path):
                    return (
                        f"spec.podTemplate.spec.containers[{c_index}].volumeMounts[{m_index}].mountPath: {mount.mount_path} "
                        f"overlaps {path}, the shared {field} of SlurmCluster {cluster.metadata.name}: mount it elsewhere"
                    )
    return None
