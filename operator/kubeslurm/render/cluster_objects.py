"""Everything the operator wants to exist for one SlurmCluster and its NodeSets.

`desired_objects` is the one answer, used by the reconcile (which applies it with
server-side apply and prunes listed objects that carry the cluster's labels but are
no longer in it) and by `kubeslurm render` (which prints it). Not in it: the two
Secrets created once (auth key, database password: secrets.auth_key_secret and
secrets.database_password_secret), and nothing prunes claims: the controller's
state claim and the MariaDB data claim are owned by the SlurmCluster and go only
with it (the StatefulSets keep their claims when deleted or scaled down), and the
shared storage claims it asks for (spec.storage) are kept even then unless the spec
says otherwise: they hold the researchers' files.
"""

from collections.abc import Collection, Mapping

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.render import slurm_pod
from kubeslurm.render.accounting.services import accounting_service, accounting_address_service
from kubeslurm.render.accounting.statefulset import accounting_stateful_set
from kubeslurm.render.bridge.device_plugin import DevicePluginSettings, device_plugin_objects
from kubeslurm.render.config.config_map import slurm_config_map
from kubeslurm.render.config.files import render_config_files
from kubeslurm.render.config.slurmdbd_conf import render_slurmdbd_conf
from kubeslurm.render.controller.services import controller_address_services, controller_service
from kubeslurm.render.controller.state_claim import controller_state_claim
from kubeslurm.render.controller.statefulset import controller_stateful_set
from kubeslurm.render.database.services import database_address_service, database_service
from kubeslurm.render.database.statefulset import database_data_claim, database_network_policy, database_stateful_set
from kubeslurm.render.k8s.disruption_budgets import controller_disruption_budget, running_jobs_disruption_budget
from kubeslurm.render.k8s.metadata import owner_reference, owned_by_cluster
from kubeslurm.render.k8s.secrets import auth_key_secret, database_password_secret, accounting_config_secret, ssh_host_key_secret, sssd_config_secret
from kubeslurm.render.login.services import login_service, ssh_service
from kubeslurm.render.login.statefulset import login_stateful_set
from kubeslurm.render.shared_storage import storage_claims
from kubeslurm.render.slurmd.services import node_set_service
from kubeslurm.render.slurmd.statefulset import slurmd_stateful_set
from kubeslurm.render.sssd_pods import sssd_config_hash, uses_directory

__all__ = [
    "auth_key_secret", "cluster_objects", "database_password_secret", "desired_objects", "node_set_objects", "owner_reference",
    "ssh_host_key_secret",
]


def desired_objects(
    cluster: SlurmCluster,
    node_sets: list[NodeSet],
    *,
    database_password: str | None,
    config_hash_key: bytes | None = None,
    placements: dict[str, dict[str, str]] | None = None,
    replicas: Mapping[str, int] | None = None,
    unix_ids: Mapping[str, int] | None = None,
    avoided_nodes: Collection[str] = (),
    directory_files: Mapping[str, str] | None = None,
    device_plugin: DevicePluginSettings | None = None,
) -> list[dict]:
    """Every object the operator applies for one cluster, in apply order.

    The cluster's objects, then each NodeSet's, then each NodeSet's ownerReference to
    its cluster (deleting the cluster removes its NodeSets too). replicas: NodeSet name
    -> the StatefulSet's replicas where a scale-down plan holds them above spec.replicas.
    unix_ids: the cluster's uid assignment (status.unixIds, see render/unix_ids.py); None
    is the assignment for the spec alone (offline render, or a cluster's first reconcile).
    avoided_nodes: Kubernetes nodes with health trouble that the pods of NodeSets with
    replaceUnhealthy must not be scheduled to (reconcile/replacement.py).
    directory_files: in ldap mode (spec.identity), sssd.conf and the CA (sssd_conf.directory_files).
    device_plugin: how to run `kubeslurm device-plugin` (image, host folders: from the operator's
    Deployment); with spec.bridge on, its DaemonSet and access come last. None: not rendered.
    """
    users = slurm_pod.unix_users(cluster, unix_ids)
    objects = cluster_objects(
        cluster, node_sets, database_password=database_password, config_hash_key=config_hash_key, placements=placements,
        users=users, directory_files=directory_files,
    )
    sssd_hash = _sssd_hash(cluster, directory_files, config_hash_key)
    for node_set in node_sets:
        objects += node_set_objects(
            cluster, node_set, replicas=(replicas or {}).get(node_set.metadata.name), users=users, sssd_hash=sssd_hash,
            avoided_nodes=avoided_nodes if node_set.spec.replace_unhealthy else (),
        )
    objects += [owned_by_cluster(node_set, cluster) for node_set in node_sets]
    if device_plugin is not None:
        objects += device_plugin_objects(cluster, device_plugin)
    return objects


def cluster_objects(
    cluster: SlurmCluster,
    node_sets: list[NodeSet],
    *,
    database_password: str | None,
    config_hash_key: bytes | None = None,
    placements: dict[str, dict[str, str]] | None = None,
    users: slurm_pod.UnixUsers | None = None,
    directory_files: Mapping[str, str] | None = None,
) -> list[dict]:
    """The objects owned by the SlurmCluster, in apply order (configs before the pods that mount them).

    node_sets: the cluster's NodeSets (they shape slurm.conf and gres.conf).
    database_password: the internal database's generated password or the external
    one read from spec.accounting.database.external.passwordSecretRef; only slurmdbd.conf
    holds it. Required when accounting is enabled.
    config_hash_key: config_hash.config_hash_key of the cluster's auth key; it keys the hash
    of slurmdbd.conf in slurmdbd's pod template. Required when accounting is enabled.
    placements: Slurm node name -> labels of its Kubernetes node, for topology.conf.
    users: the account users with their uids (slurm_pod.unix_users); None: the spec alone's.
    directory_files: sssd.conf and the CA certificate (sssd_conf.directory_files); required in
    ldap mode (spec.identity), with config_hash_key (sssd.conf may hold the bind password).
    """
    if users is None:
        users = slurm_pod.unix_users(cluster)
    files = render_config_files(cluster, node_sets, placements)
    sssd_hash = _sssd_hash(cluster, directory_files, config_hash_key)
    # Claims first: the provisioner binds them while the rest is applied. A pod created
    # before its claim is bound fails to schedule and waits out the scheduler's back-off
    # (a second); on a new cluster that was MariaDB's pod, at the head of the start chain.
    accounting = cluster.spec.accounting
    internal_database = accounting.enabled and accounting.database.internal is not None
    objects = [controller_state_claim(cluster)]
    if internal_database:
        objects.append(database_data_claim(cluster))
    objects += storage_claims(cluster)
    objects.append(slurm_config_map(cluster, files))
    if users:
        objects.append(slurm_pod.unix_users_config_map(cluster, users))
    if sssd_hash is not None:
        objects.append(sssd_config_secret(cluster, dict(directory_files)))
    if accounting.enabled:
        if database_password is None:
            raise ValueError(
                f"SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name} has accounting enabled: "
                "pass the database password (generated for the internal database, read from the Secret for an external one)"
            )
        if config_hash_key is None:
            raise ValueError(
                f"SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name} has accounting enabled: "
                "pass config_hash_key (config_hash.config_hash_key of the auth key): slurmdbd.conf holds the password "
                "and is never hashed without a key"
            )
        slurmdbd_conf = render_slurmdbd_conf(cluster, database_password)
        # In the order of the start chain (MariaDB, slurmdbd, slurmctld, slurmd): its head's pod is made first.
        if internal_database:
            objects += [
                database_service(cluster), database_address_service(cluster),
                database_stateful_set(cluster), database_network_policy(cluster),
            ]
        objects += [
            accounting_config_secret(cluster, slurmdbd_conf),
            accounting_service(cluster),
            accounting_address_service(cluster),
            accounting_stateful_set(cluster, slurmdbd_conf, config_hash_key, users=users, sssd_hash=sssd_hash),
        ]
    objects += [
        controller_service(cluster),
        *controller_address_services(cluster),
        controller_stateful_set(cluster, files, users=users, sssd_hash=sssd_hash),
    ]
    if cluster.spec.controller.backup:
        objects.append(controller_disruption_budget(cluster))
    objects += [login_service(cluster), login_stateful_set(cluster, users=users, sssd_hash=sssd_hash)]
    if cluster.spec.login.ssh.enabled:
        objects.append(ssh_service(cluster))
    return objects


def _sssd_hash(cluster: SlurmCluster, directory_files: Mapping[str, str] | None, config_hash_key: bytes | None) -> str | None:
    """The keyed hash of the directory files that rolls pods in ldap mode; None in local mode."""
    if not uses_directory(cluster):
        return None
    where = f"SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name} reads users from the directory"
    if directory_files is None:
        raise ValueError(f"{where}: pass directory_files (sssd.conf and the CA certificate, sssd_conf.directory_files)")
    if config_hash_key is None:
        raise ValueError(f"{where}: pass config_hash_key: sssd.conf may hold the bind password and is never hashed without a key")
    return sssd_config_hash(dict(directory_files), config_hash_key)


def node_set_objects(
    cluster: SlurmCluster, node_set: NodeSet, *, replicas: int | None = None, users: slurm_pod.UnixUsers | None = None,
    avoided_nodes: Collection[str] = (),
    sssd_hash: str | None = None,
) -> list[dict]:
    """The objects owned by the NodeSet: deleting it removes its pods and their budget.

    replicas: the StatefulSet's replicas when they must differ from spec.replicas
    (the operator lowers them only after draining the nodes a scale-down removes).
    users: the account users with their uids (slurm_pod.unix_users); None: the spec alone's.
    sssd_hash: in ldap mode, the keyed hash of the directory files (sssd_pods.sssd_config_hash).
    """
    if (node_set.metadata.namespace, node_set.spec.cluster_name) != (cluster.metadata.namespace, cluster.metadata.name):
        raise ValueError(
            f"NodeSet {node_set.metadata.namespace}/{node_set.metadata.name} belongs to cluster "
            f"{node_set.spec.cluster_name!r}, not to SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name}"
        )
    return [
        node_set_service(node_set),
        slurmd_stateful_set(
            cluster, node_set, replicas=replicas, users=slurm_pod.unix_users(cluster) if users is None else users,
            sssd_hash=sssd_hash, avoided_nodes=avoided_nodes,
        ),
        running_jobs_disruption_budget(node_set),
    ]
