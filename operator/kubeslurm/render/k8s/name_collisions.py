"""Names that only collide once several objects are put together.

One object's own rules live in the models (a NodeSet may not be `<its cluster>-login`, a
partition may not be `default`). What takes two objects is here: a NodeSet whose pods
or objects would carry a name that the cluster or another NodeSet already uses (names in a
namespace are shared by every cluster in it), and a NodeSet feature equal to another
NodeSet's name, which would silently put its nodes in that NodeSet's partitions (each
NodeSet is `NodeSet=<name> Feature=<name>` in slurm.conf).

Names are compared whatever their kind: a Service and a pod of one name are allowed by
Kubernetes, but the pod's host name then resolves to the Service (slurmd would reach
slurmctld's Service, or the reverse), so every derived name must be unique.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.api.slurm_cluster import MAX_LOGIN_REPLICAS
from kubeslurm.render.errors import RenderError
from kubeslurm.render.k8s import naming

ACCOUNTING_REPLICAS = 1
DATABASE_REPLICAS = 1


@dataclass(frozen=True)
class DerivedName:
    name: str
    what: str  # e.g. "the controller StatefulSet of SlurmCluster research"


def cluster_derived_names(cluster: str) -> list[DerivedName]:
    """Every name the operator may give an object or pod of SlurmCluster `cluster`, whatever its spec.

    Optional parts (backup controller, accounting, the internal database, login pods up to the
    maximum) count too: turning them on later must not collide."""
    of = f"of SlurmCluster {cluster}"
    names = [
        DerivedName(naming.controller_statefulset(cluster), f"the controller StatefulSet and Service {of}"),
        DerivedName(naming.controller_state_claim(cluster), f"the controller state claim {of}"),
        DerivedName(naming.accounting_statefulset(cluster), f"the accounting StatefulSet and Service {of}"),
        DerivedName(naming.accounting_address(cluster), f"the slurmdbd Service {of}"),
        DerivedName(naming.database_statefulset(cluster), f"the MariaDB StatefulSet, Service and NetworkPolicy {of}"),
        # Named by the StatefulSet's template (data-<statefulset>-0), not prefixed by the cluster;
        # a NodeSet makes no claims, so no NodeSet name can collide with it.
        DerivedName(naming.database_data_claim(cluster), f"the MariaDB data claim {of}"),
        DerivedName(naming.database_address(cluster), f"the database Service {of}"),
        DerivedName(naming.login_statefulset(cluster), f"the login StatefulSet and Service {of}"),
        DerivedName(naming.config_map(cluster), f"the config ConfigMap {of}"),
        DerivedName(naming.unix_users_config_map(cluster), f"the Unix users ConfigMap {of}"),
        DerivedName(naming.auth_key_secret(cluster), f"the auth key Secret {of}"),
        DerivedName(naming.accounting_config_secret(cluster), f"the slurmdbd.conf Secret {of}"),
        DerivedName(naming.database_password_secret(cluster), f"the database password Secret {of}"),
        # spec.storage.home.newClaim; the claims of spec.storage.volumes (<cluster>-shared-<name>)
        # are not host names, and an existing object of their name is refused at apply (ObjectNotOurs).
        DerivedName(naming.home_claim(cluster), f"the shared home claim {of}"),
        DerivedName(naming.ssh_service(cluster), f"the ssh Service {of}"),
        DerivedName(naming.ssh_host_key_secret(cluster), f"the ssh host key Secret {of}"),
    ]
    for ordinal, host in enumerate(naming.controller_hosts(cluster, backup=True)):
        names.append(DerivedName(host.name, f"controller pod {ordinal} {of}"))
        names.append(DerivedName(host.address, f"the Service of controller pod {ordinal} {of}"))
    pods = (
        (naming.accounting_statefulset(cluster), ACCOUNTING_REPLICAS, "accounting"),
        (naming.database_statefulset(cluster), DATABASE_REPLICAS, "MariaDB"),
        (naming.login_statefulset(cluster), MAX_LOGIN_REPLICAS, "login"),
    )
    for statefulset, count, role in pods:
        names += [DerivedName(naming.node_name(statefulset, i), f"{role} pod {i} {of}") for i in range(count)]
    return names


def node_set_derived_names(node_set: NodeSet) -> list[DerivedName]:
    """The NodeSet's StatefulSet and Service, its budget, and its pods up to maxReplicas."""
    name = node_set.metadata.name
    of = f"of NodeSet {name}"
    return [
        DerivedName(naming.node_set_statefulset(name), f"the StatefulSet and Service {of}"),
        DerivedName(naming.running_jobs_disruption_budget(name), f"the running-jobs PodDisruptionBudget {of}"),
        *(DerivedName(naming.node_name(name, i), f"pod {i} {of}") for i in range(node_set.spec.max_replicas)),
    ]


def object_label(obj: SlurmCluster | NodeSet) -> str:
    """How an error names the object (RenderError.obj): `NodeSet hpc/h100`."""
    return f"{obj.KIND} {obj.metadata.namespace}/{obj.metadata.name}"


def _taken_by(owners: Iterable[tuple[SlurmCluster | NodeSet, list[DerivedName]]]) -> dict[str, tuple[SlurmCluster | NodeSet, DerivedName]]:
    taken: dict[str, tuple[SlurmCluster | NodeSet, DerivedName]] = {}
    for owner, names in owners:
        for derived in names:
            taken.setdefault(derived.name, (owner, derived))
    return taken


def _derived(obj: SlurmCluster | NodeSet) -> list[DerivedName]:
    return cluster_derived_names(obj.metadata.name) if isinstance(obj, SlurmCluster) else node_set_derived_names(obj)


def name_collisions(
    cluster: SlurmCluster,
    node_sets: Sequence[NodeSet],
    neighbours: Sequence[SlurmCluster | NodeSet] = (),
) -> list[RenderError]:
    """Every name collision of `cluster` and its `node_sets`, each naming the field to change.

    neighbours: the other SlurmClusters and NodeSets of the namespace (those of other
    clusters; the cluster and its NodeSets may be among them, they are skipped). Their
    derived names are taken too: two clusters share one namespace's names.
    An empty list means the cluster may be rendered and applied.
    """
    ours = [cluster, *sorted(node_sets, key=lambda ns: ns.metadata.name)]
    own_ids = {(o.KIND, o.metadata.namespace, o.metadata.name) for o in ours}
    others = [
        n for n in neighbours
        if (n.KIND, n.metadata.namespace, n.metadata.name) not in own_ids and n.metadata.namespace == cluster.metadata.namespace
    ]
    errors: list[RenderError] = []

    # Other clusters' names come first, then the cluster's own, then the NodeSets in name
    # order: the later object of a colliding pair is the one told to change.
    taken = _taken_by((other, _derived(other)) for other in others)
    for obj in ours:
        names = _derived(obj)
        for derived in names:
            holder = taken.get(derived.name)
            if holder is not None and holder[0] is not obj:
                owner, theirs = holder
                errors.append(RenderError(
                    object_label(obj), "metadata.name",
                    f"{derived.what} would be named {derived.name!r}, which is {theirs.what} "
                    f"({object_label(owner)}); choose another name",
                ))
                break
        for derived in names:
            taken.setdefault(derived.name, (obj, derived))

    names_of_node_sets = {ns.metadata.name for ns in node_sets}
    for node_set in node_sets:
        for index, feature in enumerate(node_set.spec.features):
            if feature in names_of_node_sets and feature != node_set.metadata.name:
                errors.append(RenderError(
                    object_label(node_set), f"spec.features[{index}]",
                    f"{feature!r} is the name of NodeSet {feature}: slurm.conf's NodeSet={feature} Feature={feature} "
                    f"would put these nodes in {feature}'s partitions; remove it or rename the feature",
                ))
    return errors
