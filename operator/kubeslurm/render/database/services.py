"""How the internal database is reached: its pod's name and a ClusterIP Service (StorageHost)."""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.services import headless_service, virtual_ip_service


def database_address_service(cluster: SlurmCluster) -> dict:
    # Not-ready pods too: MariaDB listens on TCP only once its database and user exist (the image
    # contract, render/database/statefulset.py), which is also all its readiness probe asks; slurmdbd's
    # container polls this address every 0.2 s. Waiting for Ready instead put the probe's period, the
    # endpoint update and kube-proxy's sync on the critical path of every new cluster.
    return virtual_ip_service(naming.database_address(cluster.metadata.name), cluster, labels.DATABASE,
                              ("mariadb", naming.MARIADB_PORT), publish_not_ready=True)


def database_service(cluster: SlurmCluster) -> dict:
    name = cluster.metadata.name
    return headless_service(
        naming.database_service(name), cluster, name, labels.DATABASE,
        [("mariadb", naming.MARIADB_PORT)], publish_not_ready=False,
    )
