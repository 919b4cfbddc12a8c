"""The login pods' Services: a headless one for their DNS names, and `<cluster>-ssh`, the one
researchers use: port 22 of the login pods, ClusterIP, NodePort or LoadBalancer as
spec.login.ssh.service says."""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta
from kubeslurm.render.k8s.services import headless_service


def login_service(cluster: SlurmCluster) -> dict:
    # No ports: it exists for the pods' DNS names (srun's slurmd connections come back to them).
    name = cluster.metadata.name
    return headless_service(naming.login_service(name), cluster, name, labels.LOGIN, [], publish_not_ready=True)


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
