"""How the internal database is reached: its pod's name and a ClusterIP Service (StorageHost)."""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.services import headless_service, virtual_ip_service


def database_address_service(cluster: SlurmCluster) -> dict:
    # Ready pods only: slurmdbd's init waits until this address accepts connections.
    return virtual_ip_service(naming.database_address(cluster.metadata.name), cluster, labels.DATABASE,
                               ("mariadb", naming.MARIADB_PORT), publish_not_ready=False)


def database_service(cluster: SlurmCluster) -> dict:
    name = cluster.metadata.name
    return headless_service(
        naming.database_service(name), cluster, name, labels.DATABASE,
        [("mariadb", naming.MARIADB_PORT)], publish_not_ready=False,
    )
