"""Names of everything the operator derives from a SlurmCluster or NodeSet.

Pod names are Slurm host names, so they are stable: a replaced pod returns as
the same Slurm node. Addresses are `<pod>.<headless service>`, which resolve
through the pod's DNS search path in any cluster domain -- except the addresses of
slurmctld, slurmdbd and the internal database: those are ClusterIP Services, whose
virtual IPs outlive the pods (see controller_hosts).
"""

from dataclasses import dataclass

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
MARIADB_PORT = 3306
SSH_PORT = 22


@dataclass(frozen=True)
class Host:
    name: str
    address: str


def controller_statefulset(cluster: str) -> str:
    return f"{cluster}-controller"


def controller_hosts(cluster: str, backup: bool) -> list[Host]:
    """slurmctld's host names (its pods') and addresses (their ClusterIP Services).

    Not the pods' own DNS names: a replaced pod has a new IP, and DNS caches (CoreDNS
    answers with a 30 s TTL, and each replica caches on its own, also "no such name"
    while a headless Service has no ready pod) would send sbatch and slurmd to the dead
    pod, or nowhere, for that long after a failover. A Service's virtual IP stays the same.
    Seen in the e2e tier: sbatch refused right after the new slurmctld answered a ping, and
    a slurmdbd that started with its database moving never listened."""
    statefulset = controller_statefulset(cluster)
    count = 2 if backup else 1
    return [Host(f"{statefulset}-{i}", controller_address(cluster, i)) for i in range(count)]


def controller_address(cluster: str, ordinal: int) -> str:
    """The ClusterIP Service of controller pod `ordinal`."""
    return f"{cluster}-slurmctld-{ordinal}"


def conf_server(cluster: str, backup: bool) -> str:
    """`--conf-server` of slurmd and sackd: every slurmctld, in failover order."""
    return ",".join(f"{host.address}:{SLURMCTLD_PORT}" for host in controller_hosts(cluster, backup))


def controller_state_claim(cluster: str) -> str:
    """The PVC with StateSaveLocation, shared by the primary and the backup slurmctld."""
    return f"{cluster}-controller-state"


def controller_disruption_budget(cluster: str) -> str:
    return controller_statefulset(cluster)


# The accounting, database and login StatefulSets are named like their headless
# Services, which is what gives their pods stable DNS names.
def accounting_service(cluster: str) -> str:
    return f"{cluster}-accounting"


def accounting_statefulset(cluster: str) -> str:
    return accounting_service(cluster)


def database_data_claim(cluster: str) -> str:
    """The claim the MariaDB StatefulSet's pod 0 uses: `<template>-<statefulset>-<ordinal>`."""
    return f"data-{database_statefulset(cluster)}-0"


def database_service(cluster: str) -> str:
    return f"{cluster}-mariadb"


def database_statefulset(cluster: str) -> str:
    return database_service(cluster)


def accounting_address(cluster: str) -> str:
    """slurmdbd's ClusterIP Service (AccountingStorageHost): see controller_hosts for why not the pod's name."""
    return f"{cluster}-slurmdbd"


def database_address(cluster: str) -> str:
    """The internal database's ClusterIP Service (slurmdbd.conf StorageHost)."""
    return f"{cluster}-database"


def login_statefulset(cluster: str) -> str:
    return f"{cluster}-login"


def login_service(cluster: str) -> str:
    return login_statefulset(cluster)


def config_map(cluster: str) -> str:
    return f"{cluster}-slurm-config"


def unix_users_config_map(cluster: str) -> str:
    """The account users and their uids, read by every Slurm pod's install-config container."""
    return f"{cluster}-unix-users"


def auth_key_secret(cluster: str) -> str:
    return f"{cluster}-auth-key"


def accounting_config_secret(cluster: str) -> str:
    return f"{cluster}-slurmdbd-config"


def database_password_secret(cluster: str) -> str:
    return f"{cluster}-mariadb-password"


def ssh_service(cluster: str) -> str:
    """The Service researchers ssh to (the login pods' sshd)."""
    return f"{cluster}-ssh"


def ssh_host_key_secret(cluster: str) -> str:
    return f"{cluster}-ssh-host-keys"


def sssd_secret(cluster: str) -> str:
    """sssd.conf (with the directory's bind password) and the directory's CA certificate."""
    return f"{cluster}-sssd"


def home_claim(cluster: str) -> str:
    """The claim spec.storage.home.newClaim makes."""
    return f"{cluster}-home"


def shared_volume_claim(cluster: str, volume: str) -> str:
    """The claim of spec.storage.volumes[name=volume].newClaim."""
    return f"{cluster}-shared-{volume}"


def node_set_statefulset(node_set: str) -> str:
    return node_set


def node_set_service(node_set: str) -> str:
    """The headless Service of a NodeSet, the serviceName of its StatefulSet."""
    return node_set


def running_jobs_disruption_budget(node_set: str) -> str:
    return f"{node_set}-running-jobs"


def node_name(node_set: str, ordinal: int) -> str:
    return f"{node_set}-{ordinal}"


def node_range(node_set: str, count: int) -> str:
    """Slurm hostlist of the first `count` pods: h100-[0-7]."""
    return f"{node_set}-[0-{count - 1}]"
