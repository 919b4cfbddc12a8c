"""spec.storage in the pods: the shared homes and volumes, and the claims the operator makes for them.

Every login pod and every slurmd pod mounts each shared volume at its mountPath, so a
job's output written on any node is the file the researcher reads in the login pod.
slurmctld and slurmdbd mount none: they never open users' files.

A claim from newClaim is ReadWriteMany (many pods on many nodes mount it). Kept claims
(keepOnDelete, the default) have no ownerReference, so garbage collection leaves them
when the SlurmCluster goes; their labels name the cluster, which is how a new
SlurmCluster of the same name recognises its kept claim (reconcile/apply_objects.py).
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.api.pod_template import RESERVED_VOLUME_PREFIX
from kubeslurm.api.storage import HomeVolume, NewClaim, SharedVolume
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta
from kubeslurm.render.k8s.statefulset import persistent_volume_claim_spec

HOME_VOLUME = "home"
SHARED_ACCESS_MODE = "ReadWriteMany"
# The root of a fresh claim the operator made is root's, mode 0750 or so (what the
# provisioner chose): researchers could neither reach their homes nor write to scratch.
# The home root gets 0755 (homes below are 0700); another writable volume 1777, like
# /tmp (anyone may create, only the owner may delete).
FRESH_HOME_MODE = "0755"
FRESH_VOLUME_MODE = "1777"


def shared_volume_name(volume: SharedVolume) -> str:
    return f"{RESERVED_VOLUME_PREFIX}{volume.name}"


def _claim_name(cluster: SlurmCluster, volume: HomeVolume | SharedVolume) -> str:
    name = cluster.metadata.name
    return naming.home_claim(name) if isinstance(volume, HomeVolume) else naming.shared_volume_claim(name, volume.name)


def _source(cluster: SlurmCluster, volume: HomeVolume | SharedVolume, read_only: bool) -> dict:
    if volume.nfs is not None:
        nfs = {"server": volume.nfs.server, "path": volume.nfs.path}
        return {"nfs": {**nfs, "readOnly": True} if read_only else nfs}
    claim_name = volume.existing_claim.name if volume.existing_claim is not None else _claim_name(cluster, volume)
    claim = {"claimName": claim_name}
    return {"persistentVolumeClaim": {**claim, "readOnly": True} if read_only else claim}


def _entries(cluster: SlurmCluster) -> list[tuple[str, HomeVolume | SharedVolume, bool]]:
    storage = cluster.spec.storage
    entries = [(HOME_VOLUME, storage.home, False)] if storage.home is not None else []
    return entries + [(shared_volume_name(v), v, v.read_only) for v in storage.volumes]


def shared_pod_volumes(cluster: SlurmCluster) -> list[dict]:
    """The pod volumes of spec.storage (home first)."""
    return [{"name": name, **_source(cluster, volume, read_only)} for name, volume, read_only in _entries(cluster)]


def shared_mounts(cluster: SlurmCluster) -> list[dict]:
    """Their mounts, for every container where researchers' files are read or written."""
    mounts = []
    for name, volume, read_only in _entries(cluster):
        mount = {"name": name, "mountPath": volume.mount_path}
        # readOnly false is left out: the API server drops it, and drift checks would see a change.
        mounts.append({**mount, "readOnly": True} if read_only else mount)
    return mounts


def has_shared_home(cluster: SlurmCluster) -> bool:
    return cluster.spec.storage.home is not None


def storage_claims(cluster: SlurmCluster) -> list[dict]:
    """The claims newClaim asks for: owned by the cluster unless kept on delete."""
    claims = []
    for _, volume, _ in _entries(cluster):
        if volume.new_claim is not None:
            claims.append(_new_claim(cluster, volume, volume.new_claim))
    return claims


def _new_claim(cluster: SlurmCluster, volume: HomeVolume | SharedVolume, new_claim: NewClaim) -> dict:
    metadata = object_meta(_claim_name(cluster, volume), cluster, labels.object_labels(cluster.metadata.name, labels.STORAGE))
    if new_claim.keep_on_delete:
        del metadata["ownerReferences"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": persistent_volume_claim_spec(new_claim.size, new_claim.storage_class_name, SHARED_ACCESS_MODE),
    }


def storage_setup_script(cluster: SlurmCluster) -> list[str]:
    """Shell lines (run as root in an init container that mounts the volumes read-write) that
    give each fresh claim of newClaim its mode. Only while the volume is empty: once anything
    is on it, its root is the site's to change and is never touched again."""
    lines = []
    for _, volume, read_only in _entries(cluster):
        if volume.new_claim is None or read_only:
            continue
        mode = FRESH_HOME_MODE if isinstance(volume, HomeVolume) else FRESH_VOLUME_MODE
        # Mount paths are validated ([A-Za-z0-9_.@+=,-] components): safe unquoted.
        lines.append(f'[ -n "$(ls -A {volume.mount_path})" ] || chmod {mode} {volume.mount_path}')
    return lines
