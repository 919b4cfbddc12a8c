"""Service builders: a headless Service gives StatefulSet pods DNS names (`<pod>.<service>`
resolves through the pod's DNS search path, which is how slurmctld reaches slurmd and login
pods); a ClusterIP Service per daemon gives it a virtual IP that survives the pod (see
naming.controller_hosts)."""

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.render.k8s import labels
from kubeslurm.render.k8s.metadata import object_meta


def headless_service(
    name: str,
    owner: SlurmCluster | NodeSet,
    cluster: str,
    component: str,
    ports: list[tuple[str, int]],
    publish_not_ready: bool,
    node_set: str | None = None,
) -> dict:
    selector = labels.selector_labels(cluster, component) if node_set is None else labels.node_set_service_selector(node_set)
    spec: dict = {"clusterIP": "None", "selector": selector}
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


POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def virtual_ip_service(name: str, cluster: SlurmCluster, component: str, port: tuple[str, int],
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
