"""Services: the stable names Slurm addresses its daemons by.

Headless ones give StatefulSet pods DNS names: `<pod>.<service>` resolves through
the pod's DNS search path, which is how slurmctld reaches slurmd and login pods. Each
slurmctld pod also gets a ClusterIP Service (SlurmctldHost's address, slurmd's and
sackd's --conf-server), and so do slurmdbd (AccountingStorageHost) and the internal
database (StorageHost): a virtual IP survives the pod, see naming.controller_hosts.
The ssh Service (`<cluster>-ssh`) is the one researchers use: port 22 of the login pods,
ClusterIP, NodePort or LoadBalancer as spec.login.ssh.service says.
"""

from ..api import NodeSet, SlurmCluster
from . import labels, naming
from .metadata import object_meta


def _headless_service(
    name: str,
    owner: SlurmCluster | NodeSet,
    cluster: str,
    component: str,
    ports: list[tuple[str, int]],
    publish_not_ready: bool,
    node_set: str | None = None,
) -> dict:
    spec: dict = {"clusterIP": "None", "selector": labels.selector_labels(cluster, component, node_set)}
    if publish_not_ready:  # false is the default, which the API server does not echo back
        spec["publishNotReadyAddresses"] = True
    if ports:
        spec["ports"] = [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"} for port_name, port in ports]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(name, owner, labels.object_labels(cluster, component, node_set)),
        "spec": spec,
    }


def controller_service(cluster: SlurmCluster) -> dict:
    # Not-ready addresses are published: slurmd and slurmctld itself must resolve the
    # controller's name while it starts (a backup is never "ready" the way a primary is).
    name = cluster.metadata.name
    return _headless_service(
        naming.controller_statefulset(name), cluster, name, labels.CONTROLLER,
        [("slurmctld", naming.SLURMCTLD_PORT)], publish_not_ready=True,
    )


POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def _virtual_ip_service(name: str, cluster: SlurmCluster, component: str, port: tuple[str, int],
                        publish_not_ready: bool, pod: str | None = None) -> dict:
    selector = labels.selector_labels(cluster.metadata.name, component)
    if pod is not None:
        selector[POD_NAME_LABEL] = pod
    spec: dict = {"selector": selector,
                  "ports": [{"name": port[0], "port": port[1], "targetPort": port[1], "protocol": "TCP"}]}
    if publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(name, cluster, labels.object_labels(cluster.metadata.name, component)),
        "spec": spec,
    }


def controller_address_services(cluster: SlurmCluster) -> list[dict]:
    # Not-ready addresses too: slurmd must reach a starting slurmctld, and a backup is
    # never "ready" the way a primary is.
    hosts = naming.controller_hosts(cluster.metadata.name, cluster.spec.controller.backup)
    return [_virtual_ip_service(naming.controller_address(cluster.metadata.name, ordinal), cluster, labels.CONTROLLER,
                                ("slurmctld", naming.SLURMCTLD_PORT), publish_not_ready=True, pod=host.name)
            for ordinal, host in enumerate(hosts)]


def slurmdbd_address_service(cluster: SlurmCluster) -> dict:
    return _virtual_ip_service(naming.slurmdbd_address(cluster.metadata.name), cluster, labels.ACCOUNTING,
                               ("slurmdbd", naming.SLURMDBD_PORT), publish_not_ready=False)


def database_address_service(cluster: SlurmCluster) -> dict:
    # Ready pods only: slurmdbd's init waits until this address accepts connections.
    return _virtual_ip_service(naming.database_address(cluster.metadata.name), cluster, labels.DATABASE,
                               ("mariadb", naming.MARIADB_PORT), publish_not_ready=False)


def accounting_service(cluster: SlurmCluster) -> dict:
    name = cluster.metadata.name
    return _headless_service(
        naming.accounting_service(name), cluster, name, labels.ACCOUNTING,
        [("slurmdbd", naming.SLURMDBD_PORT)], publish_not_ready=False,
    )


def mariadb_service(cluster: SlurmCluster) -> dict:
    name = cluster.metadata.name
    return _headless_service(
        naming.mariadb_service(name), cluster, name, labels.DATABASE,
        [("mariadb", naming.MARIADB_PORT)], publish_not_ready=False,
    )


def login_service(cluster: SlurmCluster) -> dict:
    # No ports: it exists for the pods' DNS names (srun's slurmd connections come back to them).
    name = cluster.metadata.name
    return _headless_service(naming.login_service(name), cluster, name, labels.LOGIN, [], publish_not_ready=True)


def ssh_service(cluster: SlurmCluster) -> dict:
    """Where researchers ssh to: port 22 of every login pod, of the type the spec asks for."""
    name = cluster.metadata.name
    service = cluster.spec.login.ssh.service
    port = {"name": "ssh", "port": naming.SSH_PORT, "targetPort": naming.SSH_PORT, "protocol": "TCP"}
    if service.node_port is not None:
        port["nodePort"] = service.node_port
    metadata = object_meta(naming.ssh_service(name), cluster, labels.object_labels(name, labels.LOGIN),
                           annotations=dict(service.annotations) or None)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {"type": service.type, "selector": labels.selector_labels(name, labels.LOGIN), "ports": [port]},
    }


def node_set_service(node_set: NodeSet) -> dict:
    # Not-ready addresses are published: a slurmd must be reachable by name while it
    # registers, before its readiness probe can pass.
    return _headless_service(
        naming.node_set_service(node_set.metadata.name), node_set, node_set.spec.cluster_name, labels.SLURMD,
        [("slurmd", naming.SLURMD_PORT)], publish_not_ready=True, node_set=node_set.metadata.name,
    )
