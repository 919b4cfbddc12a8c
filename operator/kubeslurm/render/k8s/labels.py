"""The labels on every object the operator creates, and the subset that selects pods.

Selectors of StatefulSets are immutable, so they use only labels that never change
for the life of a pod: the cluster, the component and (slurmd) the NodeSet.
"""

from kubeslurm.ownership import (  # noqa: F401  (the keys, for render's users)
    ACCOUNTING,
    BRIDGE,
    CLUSTER,
    COMPONENT,
    COMPONENTS,
    CONTROLLER,
    DATABASE,
    INSTANCE,
    LOGIN,
    MANAGED_BY,
    MANAGER,
    NAME,
    NODE_SET,
    RUNNING_JOBS,
    SLURMD,
    STORAGE,
)


def selector_labels(cluster: str, component: str | None, node_set: str | None = None) -> dict[str, str]:
    """The labels a workload selects its pods by. component None: an object of the whole cluster."""
    labels = {NAME: "slurm", INSTANCE: cluster}
    if component is not None:
        if component not in COMPONENTS:
            raise ValueError(f"component {component!r} is not one of {COMPONENTS}")
        labels[COMPONENT] = component
    if node_set is not None:
        labels[NODE_SET] = node_set
    return labels


def node_set_service_selector(node_set: str) -> dict[str, str]:
    """What a NodeSet's headless Service selects its slurmd pods by: the NodeSet's label alone.
    It is enough: a NodeSet's name is unique in its namespace and only its pods carry it. And it
    is cheaper for the control plane at scale: Kubernetes' endpoint controllers match a Service's
    selector against every pod of the namespace each time they sync it, which a scale of 1000
    pods does hundreds of times; the four selector labels (the NodeSet's sorted last, so every
    slurmd pod of the cluster is looked at four times) took 2.2 of kube-controller-manager's
    6.8 CPU-s in such a scale-down (`make bench-scale`, its CPU profile), against 0.9 s for a
    bare StatefulSet's Service of two labels. The StatefulSet's own selector, immutable, keeps
    all four."""
    return {NODE_SET: node_set}


def object_labels(cluster: str, component: str | None, node_set: str | None = None) -> dict[str, str]:
    """Every label of an object: the selector labels plus who manages it and which cluster it serves."""
    return {**selector_labels(cluster, component, node_set), MANAGED_BY: MANAGER, CLUSTER: cluster}


def label_selector_string(labels: dict[str, str]) -> str:
    """`k=v,k=v` as a label selector in a list call or a scale subresource's status.selector."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
