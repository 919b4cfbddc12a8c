"""spec.storage: the shared file systems researchers work on, the same in every login and slurmd pod.

A job's output lands where its slurmd writes it; the researcher reads it in a login pod.
So homes, datasets and scratch space must be one file system mounted at one path in
all of them. Each volume comes from exactly one source:

- existingClaim: a PersistentVolumeClaim the site made (ReadWriteMany; ReadOnlyMany will
  do for a readOnly volume). The operator checks its access modes before mounting it,
  as only it can read the claim: a ReadWriteOnce claim would pin every pod to one node.
- newClaim: a claim the operator makes from a StorageClass and a size, always
  ReadWriteMany. It is kept when the SlurmCluster is deleted (it holds users' work)
  unless keepOnDelete is false, and a re-created cluster of the same name mounts it again.
- nfs: an NFS export, mounted by the kubelet of each node.

Paths the images own (/etc, /usr, /run, Slurm's spools, ...) are refused, and no two
volumes may overlap (one would shadow part of the other).
"""

from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from .base import KubeModel, SubfieldError
from .mount_paths import mount_path_problem, mount_path_rule, paths_overlap
from .names import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, HOST_PATTERN, MAX_DNS_SUBDOMAIN, MOUNT_PATH_PATTERN
from .quantity import QUANTITY_PATTERN

DEFAULT_HOME = "/home"
MAX_SHARED_VOLUMES = 16
# Short enough for the CRD's CEL overlap rule to stay within the API server's cost budget.
MAX_MOUNT_PATH = 256
# What the Slurm and MariaDB images hold or the operator mounts there: a shared volume at,
# under or above one of these would hide the system, Slurm's configs, key, spools or logs.
IMAGE_OWNED_PATHS = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin", "/sys", "/usr",
    "/var/lib/mysql", "/var/lib/slurm", "/var/log", "/var/run", "/var/spool",
)
IMAGE_OWNED_WHY = "the Slurm image owns"
SOURCES = ("existingClaim", "newClaim", "nfs")
_ONE_SOURCE_RULE = " + ".join(f"(has(self.{source}) ? 1 : 0)" for source in SOURCES) + " == 1"


def _not_image_owned(path: str) -> str:
    problem = mount_path_problem(path, IMAGE_OWNED_PATHS, IMAGE_OWNED_WHY)
    if problem:
        raise ValueError(f"{problem}: mount shared storage elsewhere, e.g. /data or /scratch")
    return path


MountPath = Annotated[
    str,
    Field(
        max_length=MAX_MOUNT_PATH,
        pattern=MOUNT_PATH_PATTERN,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": mount_path_rule(IMAGE_OWNED_PATHS),
                    "message": f"must not be at, under or above {', '.join(IMAGE_OWNED_PATHS)}: the Slurm image owns those",
                }
            ]
        },
    ),
    AfterValidator(_not_image_owned),
]


class ExistingClaim(KubeModel):
    name: str = Field(
        min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN,
        description="A PersistentVolumeClaim in the SlurmCluster's namespace, ReadWriteMany (ReadOnlyMany for a readOnly volume).",
    )


class NewClaim(KubeModel):
    size: str = Field(pattern=QUANTITY_PATTERN, max_length=64, description="Requested size, e.g. 100Gi.")
    storage_class_name: str | None = Field(
        default=None, min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN,
        description="A StorageClass that provisions ReadWriteMany volumes; the cluster default when unset.",
    )
    keep_on_delete: bool = Field(
        default=True,
        description=(
            "Keep the claim, and the files on it, when the SlurmCluster is deleted; a new SlurmCluster of the "
            "same name mounts it again. false: the claim is deleted with the cluster."
        ),
    )


class NFSExport(KubeModel):
    server: str = Field(min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=HOST_PATTERN, description="NFS server host name or address.")
    path: str = Field(max_length=MAX_MOUNT_PATH, pattern=MOUNT_PATH_PATTERN, description="The exported path, e.g. /export/home.")


class SharedVolumeSource(KubeModel):
    """Exactly one of existingClaim, newClaim or nfs."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{"rule": _ONE_SOURCE_RULE, "message": f"set exactly one of {', '.join(SOURCES)}"}]}
    )

    existing_claim: ExistingClaim | None = Field(default=None, description="A claim the site made (ReadWriteMany).")
    new_claim: NewClaim | None = Field(default=None, description="A ReadWriteMany claim the operator makes.")
    nfs: NFSExport | None = Field(default=None, description="An NFS export, mounted by each node's kubelet.")

    @model_validator(mode="after")
    def _one_source(self):
        given = [s for s, v in zip(SOURCES, (self.existing_claim, self.new_claim, self.nfs)) if v is not None]
        if len(given) != 1:
            raise ValueError(f"set exactly one of {', '.join(SOURCES)}, found {', '.join(given) or 'none'}")
        return self


class HomeVolume(SharedVolumeSource):
    mount_path: MountPath = Field(default=DEFAULT_HOME, description="Where the homes are: /home unless told otherwise.")
    make_user_homes: bool = Field(
        default=True,
        description=(
            "Make <mountPath>/<user> (owner the user, mode 0700) for each user of spec.accounts that has none, "
            "from the pods' init containers as root; an existing directory is never changed. Turn off when the "
            "site makes homes itself (e.g. an NFS export with root_squash, where root may not create them)."
        ),
    )


class SharedVolume(SharedVolumeSource):
    name: str = Field(
        max_length=40, pattern=DNS_LABEL_PATTERN,
        description="Names the volume in the pods (shared-<name>) and the claim newClaim makes (<cluster>-shared-<name>).",
    )
    mount_path: MountPath = Field(description="Where every login and slurmd pod mounts it, e.g. /data.")
    read_only: bool = Field(default=False, description="Mounted read-only (datasets, software).")


_HOME_PATH = f"(has(self.home) ? self.home.mountPath : '{DEFAULT_HOME}')"


class StorageSpec(KubeModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": (
                        f"!has(self.volumes) || self.volumes.all(v, v.mountPath != {_HOME_PATH}"
                        f" && !v.mountPath.startsWith({_HOME_PATH} + '/') && !{_HOME_PATH}.startsWith(v.mountPath + '/'))"
                    ),
                    "message": f"storage.volumes must not overlap the home path (storage.home.mountPath, default {DEFAULT_HOME})",
                },
                {
                    "rule": (
                        "!has(self.volumes) || self.volumes.all(a, self.volumes.all(b, a.name == b.name"
                        " || (a.mountPath != b.mountPath && !a.mountPath.startsWith(b.mountPath + '/'))))"
                    ),
                    "message": "storage.volumes must not overlap each other (one would shadow part of the other)",
                },
            ]
        }
    )

    home: HomeVolume | None = Field(
        default=None,
        description="The shared home file system. Unset: each pod has its own empty /home (files written by a job stay in its pod).",
    )
    volumes: list[SharedVolume] = Field(
        default_factory=list,
        max_length=MAX_SHARED_VOLUMES,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="More shared file systems (datasets, scratch, software), each at its own path.",
    )

    @property
    def home_path(self) -> str:
        return self.home.mount_path if self.home is not None else DEFAULT_HOME

    @model_validator(mode="after")
    def _no_overlap(self):
        names = [v.name for v in self.volumes]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise SubfieldError("volumes", f"names must be unique, repeated: {repeated}")
        for index, volume in enumerate(self.volumes):
            if paths_overlap(volume.mount_path, self.home_path):
                raise SubfieldError(
                    f"volumes[{index}].mountPath",
                    f"{volume.mount_path} overlaps the home path {self.home_path}: choose a path outside it",
                )
            for other in self.volumes[:index]:
                if paths_overlap(volume.mount_path, other.mount_path):
                    raise SubfieldError(
                        f"volumes[{index}].mountPath",
                        f"{volume.mount_path} overlaps {other.mount_path} of volume {other.name}: one would shadow the other",
                    )
        return self

    def mount_paths(self) -> list[tuple[str, str]]:
        """(field, mountPath) of every shared volume, for checks against other mounts."""
        paths = [("spec.storage.home.mountPath", self.home.mount_path)] if self.home is not None else []
        return paths + [(f"spec.storage.volumes[{i}].mountPath", v.mount_path) for i, v in enumerate(self.volumes)]
