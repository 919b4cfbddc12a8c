"""Everything the operator wants to exist for one SlurmCluster and for each NodeSet.

The handlers apply these lists with server-side apply and prune objects of
MANAGED_KINDS that carry the cluster's labels but are no longer in them, except the
two Secrets created once (auth key, database password: secrets.auth_key_secret and
secrets.database_password_secret, not part of these lists) and the claims: the
controller's state claim is never pruned, and the MariaDB data claims belong to
their StatefulSet (deleted with it, kept on scale-down).
"""

from ..api import NodeSet, SlurmCluster
from .accounting_statefulset import accounting_stateful_set
from .config_files import render_config_files
from .config_map import slurm_config_map
from .controller_state_claim import controller_state_claim
from .controller_statefulset import controller_stateful_set
from .disruption_budgets import controller_disruption_budget, running_jobs_disruption_budget
from .login_statefulset import login_stateful_set
from .mariadb_statefulset import mariadb_stateful_set
from .metadata import owner_reference
from .secrets import auth_key_secret, database_password_secret, slurmdbd_config_secret
from .services import (
    accounting_service,
    controller_address_services,
    controller_service,
    database_address_service,
    login_service,
    mariadb_service,
    node_set_service,
    slurmdbd_address_service,
)
from .slurmd_statefulset import slurmd_stateful_set
from .slurmdbd_conf import render_slurmdbd_conf

# The handlers' entry points: the two builders below and these three helpers.
__all__ = [
    "MANAGED_KINDS", "auth_key_secret", "cluster_objects", "database_password_secret", "node_set_objects",
    "owner_reference",
]

MANAGED_KINDS = (
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("apps/v1", "StatefulSet"),
    ("policy/v1", "PodDisruptionBudget"),
)


def cluster_objects(
    cluster: SlurmCluster,
    node_sets: list[NodeSet],
    *,
    database_password: str | None,
    placements: dict[str, dict[str, str]] | None = None,
) -> list[dict]:
    """The objects owned by the SlurmCluster, in apply order (configs before the pods that mount them).

    node_sets: the cluster's NodeSets (they shape slurm.conf and gres.conf).
    database_password: the internal database's generated password or the external
    one read from spec.accounting.database.external.passwordSecretRef; only slurmdbd.conf
    holds it. Required when accounting is enabled.
    placements: Slurm node name -> labels of its Kubernetes node, for topology.conf.
    """
    files = render_config_files(cluster, node_sets, placements)
    objects = [
        slurm_config_map(cluster, files),
        controller_state_claim(cluster),
        controller_service(cluster),
        *controller_address_services(cluster),
        controller_stateful_set(cluster, files),
    ]
    if cluster.spec.controller.backup:
        objects.append(controller_disruption_budget(cluster))
    accounting = cluster.spec.accounting
    if accounting.enabled:
        if database_password is None:
            raise ValueError(
                f"SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name} has accounting enabled: "
                "pass the database password (generated for the internal database, read from the Secret for an external one)"
            )
        slurmdbd_conf = render_slurmdbd_conf(cluster, database_password)
        objects += [
            slurmdbd_config_secret(cluster, slurmdbd_conf),
            accounting_service(cluster),
            slurmdbd_address_service(cluster),
            accounting_stateful_set(cluster, slurmdbd_conf),
        ]
        if accounting.database.internal is not None:
            objects += [mariadb_service(cluster), database_address_service(cluster), mariadb_stateful_set(cluster)]
    objects += [login_service(cluster), login_stateful_set(cluster)]
    return objects


def node_set_objects(cluster: SlurmCluster, node_set: NodeSet, *, replicas: int | None = None) -> list[dict]:
    """The objects owned by the NodeSet: deleting it removes its pods and their budget.

    replicas: the StatefulSet's replicas when they must differ from spec.replicas
    (the operator lowers them only after draining the nodes a scale-down removes).
    """
    if (node_set.metadata.namespace, node_set.spec.cluster_name) != (cluster.metadata.namespace, cluster.metadata.name):
        raise ValueError(
            f"NodeSet {node_set.metadata.namespace}/{node_set.metadata.name} belongs to cluster "
            f"{node_set.spec.cluster_name!r}, not to SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name}"
        )
    return [
        node_set_service(node_set),
        slurmd_stateful_set(cluster, node_set, replicas=replicas),
        running_jobs_disruption_budget(node_set),
    ]
