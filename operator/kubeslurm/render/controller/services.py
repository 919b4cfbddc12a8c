"""How slurmctld is reached: a headless Service for its pods' names and one ClusterIP Service
per slurmctld pod (SlurmctldHost's address, slurmd's and sackd's --conf-server)."""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.services import headless_service, virtual_ip_service


def controller_service(cluster: SlurmCluster) -> dict:
    # Not-ready addresses are published: slurmd and slurmctld itself must resolve the
    # controller's name while it starts (a backup is never "ready" the way a primary is).
    name = cluster.metadata.name
    return headless_service(
        naming.controller_statefulset(name), cluster, name, labels.CONTROLLER,
        [("slurmctld", naming.SLURMCTLD_PORT)], publish_not_ready=True,
    )


def controller_address_services(cluster: SlurmCluster) -> list[dict]:
    # Not-ready addresses too: slurmd must reach a starting slurmctld, and a backup is
    # never "ready" the way a primary is.
    hosts = naming.controller_hosts(cluster.metadata.name, cluster.spec.controller.backup)
    return [virtual_ip_service(naming.controller_address(cluster.metadata.name, ordinal), cluster, labels.CONTROLLER,
                                ("slurmctld", naming.SLURMCTLD_PORT), publish_not_ready=True, pod=host.name)
            for ordinal, host in enumerate(hosts)]
