"""The SlurmCluster kind: one Slurm controller, its accounting, login pods and policy."""

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from .base import KubeModel, SubfieldError
from .bridge import BridgeSpec
from .conditions import CONDITIONS_LIST, Condition
from .names import (
    ANNOTATION_VALUE_PATTERN,
    DATABASE_NAME_PATTERN,
    DATABASE_USER_PATTERN,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    HOST_PATTERN,
    IMAGE_PATTERN,
    LABEL_KEY_PATTERN,
    MAX_DNS_SUBDOMAIN,
    MAX_IMAGE,
    MAX_LABEL_KEY,
    RESERVED_ACCOUNT_NAMES,
    RESERVED_NODE_SET_NAMES,
    RESERVED_PARTITION_NAMES,
    SLURM_CONF_KEY_HELP,
    SLURM_CONF_KEY_PATTERN,
    SLURM_CONF_VALUE_HELP,
    SLURM_CONF_VALUE_PATTERN,
    SLURM_NAME_PATTERN,
    UNIX_USER_PATTERN,
    matching,
)
from .identity import IdentitySpec
from .node_health import NodeHealthSpec
from .quantity import QUANTITY_PATTERN
from .secret_ref import SecretKeyRef
from .slurm_time import SLURM_DURATION_PATTERN
from .storage import StorageSpec

DEFAULT_SLURM_IMAGE = "localhost/kubeslurm/slurm:24.11"
DEFAULT_MARIADB_IMAGE = "localhost/kubeslurm/mariadb:11"
MAX_LOGIN_REPLICAS = 16
# sacctmgr takes limits as signed 32/64-bit numbers; far above any real cluster, far below overflow.
MAX_LIMIT = 1_000_000_000

Image = Annotated[str, Field(min_length=1, max_length=MAX_IMAGE, pattern=IMAGE_PATTERN)]
StorageClassName = Annotated[str, Field(min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN)]


def _not_reserved(name: str, reserved: tuple[str, ...], why: str) -> str:
    if name.lower() in reserved:
        raise ValueError(f"{name!r} is reserved: {why}; choose another name")
    return name


def _reserved_rule(reserved: tuple[str, ...], why: str) -> dict:
    return {"x-kubernetes-validations": [{"rule": f"!(self.lowerAscii() in {list(reserved)})", "message": f"{', '.join(reserved)} is reserved: {why}"}]}


PARTITION_RESERVED_WHY = "PartitionName=DEFAULT is Slurm's template for the partitions after it, not a partition"
ACCOUNT_RESERVED_WHY = "the account root is the top of Slurm's association tree and its limits bind every account"
NODE_SET_RESERVED_WHY = "Nodes=ALL in a partition means every node of the cluster"


class SlurmSpec(KubeModel):
    image: Image = Field(
        default=DEFAULT_SLURM_IMAGE,
        description="The Slurm image (slurmctld, slurmd, slurmdbd and the client tools; the command picks the role).",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Pull policy for every Slurm container."
    )
    constrain_with_cgroups: bool = Field(
        default=False,
        description=(
            "Confine jobs with Linux cgroups (proctrack/cgroup, task/cgroup, ConstrainCores/RAMSpace/Devices). "
            "Needs slurmd pods that may write their cgroup tree (privileged); when false, Slurm tracks "
            "processes itself and GPUs are handed out through CUDA_VISIBLE_DEVICES only."
        ),
    )
    containers: bool = Field(
        default=False,
        description=(
            "Let jobs run OCI containers as job steps (`srun --container=<bundle>`): renders oci.conf with "
            "rootless crun, run as the job's user. slurmd pods then run without a seccomp filter (seccomp "
            "Unconfined), because the runtime's default profile refuses the user namespaces a rootless "
            "container needs; they gain no capability and stay unprivileged unless constrainWithCgroups is set."
        ),
    )


class Persistence(KubeModel):
    size: str = Field(default="1Gi", pattern=QUANTITY_PATTERN, description="PVC size, e.g. 1Gi.")
    storage_class_name: StorageClassName | None = Field(
        default=None, description="StorageClass of the PVC; the cluster default when unset."
    )


class ControllerSpec(KubeModel):
    persistence: Persistence = Field(
        default_factory=Persistence, description="The PVC that holds StateSaveLocation (queued and running jobs)."
    )
    backup: bool = Field(
        default=False,
        description=(
            "Run a second slurmctld as backup (SlurmctldHost listed twice). Both share StateSaveLocation, "
            "so the PVC's StorageClass must support ReadWriteMany."
        ),
    )


class InternalDatabase(KubeModel):
    size: str = Field(default="2Gi", pattern=QUANTITY_PATTERN, description="PVC size of the MariaDB data.")
    storage_class_name: StorageClassName | None = Field(default=None, description="StorageClass of the MariaDB PVC.")
    image: Image = Field(default=DEFAULT_MARIADB_IMAGE, description="The MariaDB image.")


class ExternalDatabase(KubeModel):
    host: str = Field(
        min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=HOST_PATTERN,
        description="MySQL/MariaDB host name, IPv4 or IPv6 address reachable from the slurmdbd pod (StorageHost).",
    )
    port: int = Field(default=3306, ge=1, le=65535)
    user: str = Field(
        default="slurm", min_length=1, max_length=80, pattern=DATABASE_USER_PATTERN,
        description="Database user for slurmdbd (StorageUser): letters, digits, '_', '.' and '-'.",
    )
    database: str = Field(
        default="slurm_acct_db", min_length=1, max_length=64, pattern=DATABASE_NAME_PATTERN,
        description="Database (StorageLoc): letters, digits and '_'.",
    )
    password_secret_ref: SecretKeyRef = Field(description="Where the database password is kept.")


class DatabaseSpec(KubeModel):
    """Exactly one of internal or external."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.internal) != has(self.external)",
                    "message": "set exactly one of database.internal or database.external",
                }
            ]
        }
    )

    internal: InternalDatabase | None = Field(default=None, description="A MariaDB StatefulSet run by the operator.")
    external: ExternalDatabase | None = Field(default=None, description="A database you run yourself.")

    @model_validator(mode="after")
    def _exactly_one(self):
        if (self.internal is None) == (self.external is None):
            raise ValueError("set exactly one of database.internal or database.external")
        return self


def _default_database() -> DatabaseSpec:
    return DatabaseSpec(internal=InternalDatabase())


class AccountingSpec(KubeModel):
    enabled: bool = Field(default=True, description="Run slurmdbd and record every job (sacct, sshare, limits).")
    database: DatabaseSpec = Field(default_factory=_default_database, description="Where slurmdbd keeps its records: internal (default) or external.")


class LoginService(KubeModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="How researchers reach sshd: the Service `<cluster>-ssh` on port 22.")
    node_port: int | None = Field(default=None, ge=30000, le=32767, description="A fixed nodePort (type NodePort or LoadBalancer).")
    annotations: dict[
        Annotated[str, Field(max_length=MAX_LABEL_KEY, pattern=LABEL_KEY_PATTERN)],
        Annotated[str, Field(max_length=1024, pattern=ANNOTATION_VALUE_PATTERN)],
    ] = Field(default_factory=dict, max_length=32, description="Annotations of the Service (load balancer settings).")

    @model_validator(mode="after")
    def _node_port_needs_its_type(self):
        if self.node_port is not None and self.type == "ClusterIP":
            raise SubfieldError("nodePort", "a ClusterIP Service has no node port: set type NodePort or LoadBalancer, or remove nodePort")
        return self


class LoginSsh(KubeModel):
    enabled: bool = Field(default=True, description="Run sshd in the login pods: researchers log in with `ssh <user>@<login Service>`.")
    authorized_keys_secret: str | None = Field(
        default=None, min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN,
        description=(
            "A Secret in the SlurmCluster's namespace whose keys are user names and whose values are their "
            "authorized_keys lines (ssh public keys). Unset: nobody can log in with a key yet."
        ),
    )
    service: LoginService = Field(default_factory=LoginService, description="The Service in front of the login pods' sshd.")


class LoginSpec(KubeModel):
    replicas: int = Field(default=1, ge=0, le=MAX_LOGIN_REPLICAS, description="Login pods (`<cluster>-login-N`) with sbatch, srun, squeue.")
    ssh: LoginSsh = Field(
        default_factory=LoginSsh,
        description="sshd in the login pods: key login only, never as root or with a password; host keys generated once.",
    )


class FairShare(KubeModel):
    enabled: bool = Field(default=True, description="Priority from fair-share between accounts (priority/multifactor).")
    decay_half_life: str = Field(
        default="7-0",
        pattern=SLURM_DURATION_PATTERN,
        description="PriorityDecayHalfLife: how fast past usage is forgotten, in Slurm time syntax (7-0 = 7 days).",
    )


class SchedulingSpec(KubeModel):
    backfill: bool = Field(default=True, description="sched/backfill: start small jobs ahead of blocked big ones when that delays nobody.")
    fair_share: FairShare = Field(default_factory=FairShare, description="Fair-share between accounts (needs accounting).")
    preemption: Literal["off", "qos", "partition"] = Field(
        default="off",
        description="off: nothing is preempted; qos: preempt/qos; partition: preempt/partition_prio. Preempted jobs are requeued.",
    )


class AccountLimits(KubeModel):
    max_gpus: int | None = Field(default=None, alias="maxGPUs", ge=0, le=MAX_LIMIT, description="GrpTRES=gres/gpu=N: GPUs the account may use at once.")
    max_cpus: int | None = Field(default=None, alias="maxCPUs", ge=0, le=MAX_LIMIT, description="GrpTRES=cpu=N.")
    max_nodes: int | None = Field(default=None, ge=0, le=MAX_LIMIT, description="GrpTRES=node=N.")
    max_running_jobs: int | None = Field(default=None, ge=0, le=MAX_LIMIT, description="GrpJobs=N.")
    max_submit_jobs: int | None = Field(default=None, ge=0, le=MAX_LIMIT, description="GrpSubmitJobs=N.")
    max_job_time: str | None = Field(
        default=None, pattern=SLURM_DURATION_PATTERN,
        description="MaxWall: the longest time limit one job of the account may have, in Slurm time syntax (e.g. 1-00:00:00).",
    )


QosName = Annotated[str, Field(max_length=40, pattern=SLURM_NAME_PATTERN)]
# Slurm makes the QOS `normal` itself and gives it to every association: it may be named
# (in preempt lists and accounts' qos) without being declared.
BUILTIN_QOS = "normal"


class QosLimits(KubeModel):
    max_job_time: str | None = Field(
        default=None, pattern=SLURM_DURATION_PATTERN,
        description="MaxWall: the longest time limit a job in this QOS may have (Slurm time syntax).",
    )
    max_jobs_per_user: int | None = Field(default=None, ge=0, le=MAX_LIMIT, description="MaxJobsPerUser: running jobs of one user in this QOS.")
    max_gpus_per_user: int | None = Field(
        default=None, alias="maxGPUsPerUser", ge=0, le=MAX_LIMIT,
        description="MaxTRESPerUser=gres/gpu=N: GPUs one user may use at once in this QOS.",
    )


class Qos(KubeModel):
    name: QosName = Field(description="QOS name: lower-case letters, digits, '_' and '-', starting with a letter.")
    priority: int = Field(default=0, ge=0, le=MAX_LIMIT, description="Priority= of the QOS (weighted by PriorityWeightQOS in a job's priority).")
    preempt: list[QosName] = Field(
        default_factory=list, max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="QOS whose running jobs a job in this QOS may preempt (requeue) with scheduling.preemption: qos.",
    )
    limits: QosLimits | None = Field(default=None, description="Limits of every job and user in this QOS.")


class Account(KubeModel):
    name: str = Field(
        max_length=40, pattern=SLURM_NAME_PATTERN,
        description="Slurm account name: lower-case letters, digits, '_' and '-', starting with a letter; not root.",
        json_schema_extra=_reserved_rule(RESERVED_ACCOUNT_NAMES, ACCOUNT_RESERVED_WHY),
    )
    shares: int = Field(default=1, ge=1, le=1_000_000, description="Fairshare= of the account relative to its siblings.")
    users: list[Annotated[str, Field(max_length=32, pattern=UNIX_USER_PATTERN)]] = Field(
        default_factory=list,
        max_length=10_000,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Unix user names that may charge this account (they must exist in the Slurm image or your directory service).",
    )
    limits: AccountLimits | None = Field(default=None, description="Limits on what the whole account uses at once.")
    qos: list[QosName] = Field(
        default_factory=list, max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="QOS the account's users may ask for (`--qos`); spec.qos names or normal. Empty: Slurm's default (normal).",
    )
    default_qos: QosName | None = Field(
        default=None, alias="defaultQOS", description="DefaultQOS of the account's jobs without --qos; one of its qos."
    )

    @field_validator("users")
    @classmethod
    def _users_are_unix_names(cls, users: list[str]) -> list[str]:
        for user in users:
            if not re.fullmatch(UNIX_USER_PATTERN, user) or len(user) > 32:
                raise ValueError(f"user {user!r} is not a Unix user name (lower case, digits, '_' and '-', at most 32)")
        if len(set(users)) != len(users):
            raise ValueError("users must not repeat")
        return users

    @field_validator("name")
    @classmethod
    def _not_root(cls, name: str) -> str:
        return _not_reserved(name, RESERVED_ACCOUNT_NAMES, ACCOUNT_RESERVED_WHY)


NodeSetName = Annotated[
    str, Field(max_length=40, pattern=DNS_LABEL_PATTERN, json_schema_extra=_reserved_rule(RESERVED_NODE_SET_NAMES, NODE_SET_RESERVED_WHY))
]


class Partition(KubeModel):
    name: str = Field(
        max_length=40, pattern=SLURM_NAME_PATTERN,
        description="Slurm partition name: lower-case letters, digits, '_' and '-', starting with a letter; not default.",
        json_schema_extra=_reserved_rule(RESERVED_PARTITION_NAMES, PARTITION_RESERVED_WHY),
    )
    node_sets: list[NodeSetName] = Field(
        min_length=1, max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"}, description="NodeSets whose nodes form this partition.")
    default: bool = Field(default=False, description="Jobs without -p land here. At most one partition is the default.")
    max_time: str = Field(default="UNLIMITED", pattern=SLURM_DURATION_PATTERN, description="MaxTime of a job.")
    default_time: str | None = Field(default=None, pattern=SLURM_DURATION_PATTERN, description="DefaultTime of a job without --time.")
    priority_tier: int | None = Field(default=None, ge=0, le=65533, description="PriorityTier (also the preemption order with preemption: partition).")

    @field_validator("name")
    @classmethod
    def _not_default(cls, name: str) -> str:
        return _not_reserved(name, RESERVED_PARTITION_NAMES, PARTITION_RESERVED_WHY)

    @field_validator("node_sets")
    @classmethod
    def _not_all(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if name.lower() in RESERVED_NODE_SET_NAMES:
                raise SubfieldError(f"[{index}]", f"{name!r} is reserved: {NODE_SET_RESERVED_WHY}; no NodeSet may have that name")
        if len(set(names)) != len(names):
            raise ValueError("nodeSets must not repeat")
        return names


class Topology(KubeModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.plugin != 'block' || self.nodeLabels.size() == 1",
                    "message": "topology.nodeLabels must name exactly one label when plugin is block",
                }
            ]
        }
    )

    plugin: Literal["tree", "block"] = Field(
        default="tree",
        description="topology/tree (switch hierarchy) or topology/block (e.g. NVLink domains).",
    )
    node_labels: list[Annotated[str, Field(max_length=MAX_LABEL_KEY, pattern=LABEL_KEY_PATTERN)]] = Field(
        min_length=1,
        max_length=4,
        description=(
            "Kubernetes node label keys that place a slurmd pod in the network. tree: coarsest level first "
            "(e.g. [topology.kubernetes.io/zone, example.com/switch]); block: one label naming the block."
        ),
    )
    block_sizes: list[Annotated[int, Field(ge=1, le=65533)]] | None = Field(
        default=None, max_length=16, description="BlockSizes= for topology/block: node counts, each at least 1."
    )

    @model_validator(mode="after")
    def _block_has_one_label(self):
        if self.plugin == "block" and len(self.node_labels) != 1:
            raise ValueError("topology.nodeLabels must name exactly one label when plugin is block")
        return self


class SlurmClusterSpec(KubeModel):
    slurm: SlurmSpec = Field(default_factory=SlurmSpec, description="The Slurm image and how jobs are confined.")
    controller: ControllerSpec = Field(default_factory=ControllerSpec, description="slurmctld: its state volume and an optional backup.")
    accounting: AccountingSpec = Field(default_factory=AccountingSpec, description="slurmdbd and its database (sacct, sshare, fair-share, limits).")
    login: LoginSpec = Field(default_factory=LoginSpec, description="Login pods where users run sbatch, srun, squeue, sacct.")
    identity: IdentitySpec = Field(
        default_factory=IdentitySpec,
        description="Who the researchers are: local (the users of accounts) or ldap (the site's directory through SSSD in every Slurm pod).",
    )
    storage: StorageSpec = Field(
        default_factory=StorageSpec,
        description="Shared file systems (homes, datasets, scratch) mounted at the same path in every login and slurmd pod.",
    )
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec, description="Backfill, fair-share and preemption.")
    accounts: list[Account] = Field(default_factory=list, max_length=1000, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}, description="Slurm accounts, their shares, users and limits.")
    qos: list[Qos] = Field(
        default_factory=list, max_length=100,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Quality of service levels (sacctmgr add qos): priorities, which QOS preempt which, limits.",
    )
    partitions: list[Partition] = Field(
        default_factory=list,
        max_length=64,
        description="Partitions, each made of NodeSets.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "x-kubernetes-validations": [
                {
                    "rule": "self.filter(p, has(p.default) && p.default).size() <= 1",
                    "message": "only one partition may be default",
                }
            ],
        },
    )
    topology: Topology | None = Field(default=None, description="Render topology.conf from Kubernetes node labels.")
    node_health: NodeHealthSpec = Field(
        default_factory=NodeHealthSpec, description="Health checks that drain a bad node (README: Node health)."
    )
    bridge: BridgeSpec = Field(
        default_factory=BridgeSpec,
        description="Kubernetes pods that Slurm schedules (schedulerName kubeslurm-<cluster>): which namespaces, "
                    "charged to which account, user, QOS and partition. Off by default; in development.",
    )
    slurm_conf: dict[
        Annotated[str, Field(max_length=64), *matching(SLURM_CONF_KEY_PATTERN, SLURM_CONF_KEY_HELP)],
        Annotated[str, Field(min_length=1, max_length=1024), *matching(SLURM_CONF_VALUE_PATTERN, SLURM_CONF_VALUE_HELP)],
    ] = Field(
        max_length=128,
        default_factory=dict,
        description=(
            "Extra slurm.conf keys (e.g. {MaxJobCount: '20000'}). Keys the operator sets itself are refused. "
            "A key is letters and digits; a value is " + SLURM_CONF_VALUE_HELP + "."
        ),
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.accounting) || !has(self.accounting.enabled) || self.accounting.enabled"
                    " || !has(self.accounts) || self.accounts.size() == 0",
                    "message": "accounts need accounting.enabled: true (they live in slurmdbd)",
                },
                {
                    "rule": "!has(self.accounting) || !has(self.accounting.enabled) || self.accounting.enabled"
                    " || !has(self.scheduling) || !has(self.scheduling.preemption) || self.scheduling.preemption != 'qos'",
                    "message": "preemption: qos needs accounting.enabled: true (QOS live in slurmdbd)",
                },
                {
                    "rule": "!has(self.bridge) || !has(self.bridge.namespaces) || self.bridge.namespaces.all(n,"
                    " has(self.accounts) && self.accounts.exists(a, a.name == n.account))",
                    "message": "every bridge.namespaces[].account must be one of spec.accounts",
                },
                {
                    "rule": "!has(self.bridge) || !has(self.bridge.namespaces) || self.bridge.namespaces.all(n,"
                    " !has(n.partition) || (has(self.partitions) && self.partitions.exists(p, p.name == n.partition)))",
                    "message": "every bridge.namespaces[].partition must be one of spec.partitions",
                },
            ]
        }
    )

    @model_validator(mode="after")
    def _cross_field(self):
        if not self.accounting.enabled and self.accounts:
            raise ValueError("accounts need accounting.enabled: true (they live in slurmdbd); enable accounting or remove accounts")
        if not self.accounting.enabled and self.scheduling.preemption == "qos":
            raise ValueError("preemption: qos needs accounting.enabled: true (QOS live in slurmdbd)")
        defaults = [p.name for p in self.partitions if p.default]
        if len(defaults) > 1:
            raise ValueError(f"only one partition may be default, found {defaults}")
        if not self.accounting.enabled and self.qos:
            raise ValueError("qos needs accounting.enabled: true (QOS live in slurmdbd); enable accounting or remove qos")
        known_qos = {q.name for q in self.qos} | {BUILTIN_QOS}
        for index, qos in enumerate(self.qos):
            for name in qos.preempt:
                if name not in known_qos:
                    raise SubfieldError(f"qos[{index}].preempt", f"{name!r} is not in spec.qos (nor {BUILTIN_QOS}): declare it or remove it")
                if name == qos.name:
                    raise SubfieldError(f"qos[{index}].preempt", f"a QOS cannot preempt itself ({name!r})")
        for index, account in enumerate(self.accounts):
            for name in account.qos:
                if name not in known_qos:
                    raise SubfieldError(f"accounts[{index}].qos", f"{name!r} is not in spec.qos (nor {BUILTIN_QOS}): declare it or remove it")
            if account.default_qos is not None and account.default_qos not in (account.qos or [BUILTIN_QOS]):
                raise SubfieldError(f"accounts[{index}].defaultQOS", f"{account.default_qos!r} is not among the account's qos: add it there")
        for field_name, items in (("partitions", self.partitions), ("accounts", self.accounts), ("qos", self.qos)):
            names = [item.name for item in items]
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"{field_name} names must be unique, repeated: {repeated}")
        self._bridge_mapping_is_declared()
        # Slurm reads keys case-insensitively: two spellings of one key would be two lines for one setting.
        by_lower: dict[str, str] = {}
        for key in self.slurm_conf:
            first = by_lower.setdefault(key.lower(), key)
            if first != key:
                raise SubfieldError(f"slurmConf.{key}", f"repeats {first} (Slurm reads keys without regard to case): keep one")
        return self

    def _bridge_mapping_is_declared(self) -> None:
        """Each bridged namespace names an account, user, QOS and partition this spec declares,
        so a placeholder job can never be refused by Slurm for an association nobody made."""
        accounts = {a.name: a for a in self.accounts}
        partitions = {p.name for p in self.partitions}
        for index, mapping in enumerate(self.bridge.namespaces):
            where = f"bridge.namespaces[{index}]"
            account = accounts.get(mapping.account)
            if account is None:
                raise SubfieldError(f"{where}.account", f"{mapping.account!r} is not in spec.accounts: declare it there")
            if mapping.user not in account.users:
                raise SubfieldError(f"{where}.user", f"{mapping.user!r} is not a user of account {account.name!r}: add it to its users")
            if mapping.qos is not None and mapping.qos not in (account.qos or [BUILTIN_QOS]):
                raise SubfieldError(f"{where}.qos", f"{mapping.qos!r} is not among account {account.name!r}'s qos: add it there")
            if mapping.partition is not None and mapping.partition not in partitions:
                raise SubfieldError(f"{where}.partition", f"{mapping.partition!r} is not in spec.partitions")


class AppliedAccount(KubeModel):
    name: str = Field(description="A Slurm account kubeslurm created for spec.accounts.")
    users: list[str] = Field(default_factory=list, description="The users kubeslurm associated with it.")


class SlurmClusterStatus(KubeModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=CONDITIONS_LIST)
    nodes: int | None = Field(default=None, description="Slurm nodes registered.")
    idle_nodes: int | None = None
    gpus: int | None = Field(default=None, description="GPUs registered in Slurm.")
    running_jobs: int | None = None
    pending_jobs: int | None = None
    controller_endpoint: str | None = Field(default=None, description="host:port of slurmctld inside the cluster.")
    applied_config_hash: str | None = Field(default=None, description="Hash of the configuration slurmctld and slurmd run.")
    applied_accounts_hash: str | None = Field(default=None, description="Hash of spec.accounts as last applied with sacctmgr.")
    topology_nodes_hash: str | None = Field(
        default=None, description="Hash of the Slurm nodes registered when topology.conf was last reloaded."
    )
    applied_accounts: list[AppliedAccount] | None = Field(
        default=None,
        description=(
            "The accounts and user associations kubeslurm made in Slurm and has not removed yet. Leaving "
            "spec.accounts removes these, and only these: never what a human added with sacctmgr, never job records."
        ),
    )
    device_plugin_deployed: bool | None = Field(
        default=None,
        description=(
            "kubeslurm applied spec.bridge's GPU device plugin (its DaemonSet, ServiceAccount, Role and RoleBinding); "
            "they are deleted once the bridge is turned off."
        ),
    )
    unix_ids: dict[str, int] | None = Field(
        default=None,
        description=(
            "The uid of every user spec.accounts has ever named. A user keeps its uid for good; a removed "
            "user's uid is never given to another user (its files may remain on shared storage)."
        ),
    )

