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


def object_labels(cluster: str, component: str | None, node_set: str | None = None) -> dict[str, str]:
    """Every label of an object: the selector labels plus who manages it and which cluster it serves."""
    return {**selector_labels(cluster, component, node_set), MANAGED_BY: MANAGER, CLUSTER: cluster}


def label_selector_string(labels: dict[str, str]) -> str:
    """`k=v,k=v` as a label selector in a list call or a scale subresource's status.selector."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
