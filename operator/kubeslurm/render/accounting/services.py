"""How slurmdbd is reached: its pod's name and a ClusterIP Service (AccountingStorageHost)."""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.services import headless_service, virtual_ip_service


def accounting_address_service(cluster: SlurmCluster) -> dict:
    # Not-ready pods too: slurmdbd listens once it has its database (its readiness probe is that
    # TCP check), and a first slurmctld polls this address every 0.2 s before it starts
    # (render/controller/statefulset.py): like the database's, without the probe's lag.
    return virtual_ip_service(naming.accounting_address(cluster.metadata.name), cluster, labels.ACCOUNTING,
                              ("slurmdbd", naming.SLURMDBD_PORT), publish_not_ready=True)


def accounting_service(cluster: SlurmCluster) -> dict:
    name = cluster.metadata.name
    return headless_service(
        naming.accounting_service(name), cluster, name, labels.ACCOUNTING,
        [("slurmdbd", naming.SLURMDBD_PORT)], publish_not_ready=False,
    )
