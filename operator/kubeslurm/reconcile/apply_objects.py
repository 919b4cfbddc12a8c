"""Make the live objects match the desired ones: apply what differs, prune what is no longer wanted.

Both work from the one listing of the cluster's objects taken at the start of the
reconcile (run.live). An existing object that the cluster does not own (planted, or
made by another tool) is never applied over: the step fails naming it, before it applies
anything. An object is applied only when the live one does not already
contain every desired field, so a steady cluster costs no writes. Pruning deletes only
objects that the cluster or one of its NodeSets owns (an object with our labels that
someone else made is not ours to delete), with a uid precondition, and never the
objects of a NodeSet whose spec is invalid.
"""

from .. import ownership
from ..render.bridge.device_plugin import DEVICE_PLUGIN_KINDS, device_plugin_name
from .drift import contains
from .events import EventRecorder
from .kube_api import KubeApi
from .requests_at_once import each_at_once
from .run_state import Run, StepFailed


# The waves of an apply, each sent side by side (requests_at_once.py): claims first, so that the
# provisioner binds them while the rest goes (a pod made before its claim is bound fails to
# schedule and waits out the scheduler's back-off, a second); then everything pods mount or run
# as (ConfigMaps, Secrets, ServiceAccounts, Services...); then what makes pods, in the order of
# the start chain.
APPLY_WAVES = (frozenset({"PersistentVolumeClaim"}), None, frozenset({"StatefulSet", "DaemonSet"}))


def apply_desired(api: KubeApi, run: Run) -> None:
    """Every object checked first (one someone else made stops the step before anything is
    applied), then what differs applied in APPLY_WAVES."""
    namespace = run.cluster.metadata.namespace
    ours = _our_uids(run)

    def remember(obj: dict, answer: dict | None) -> None:
        run.live[_key(obj)] = answer

    # Not listed (a kind we do not list, or not labelled ours): look.
    unseen = [obj for obj in run.desired if _key(obj) not in run.live]
    each_at_once(lambda obj: api.get(ownership.kind_of(obj), namespace, obj["metadata"]["name"]), unseen, remember)
    changed = []
    for obj in run.desired:
        current = run.live.get(_key(obj))
        if current is not None and obj["kind"] != "NodeSet" and not _kept_by_us(current, obj):
            # (the spec names its NodeSets: ours to own)
            _refuse_foreign(current, _key(obj), namespace, ours)
        if current is None or not contains(current, obj):
            changed.append(obj)
    for wave in apply_waves(changed):
        each_at_once(api.apply, wave, remember)


def apply_waves(objects: list[dict]) -> list[list[dict]]:
    """objects in APPLY_WAVES, each wave in the objects' order (None: every kind no other wave takes)."""
    named = frozenset().union(*(kinds for kinds in APPLY_WAVES if kinds is not None))
    return [[obj for obj in objects if (obj["kind"] not in named if kinds is None else obj["kind"] in kinds)]
            for kinds in APPLY_WAVES]


def _key(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _our_uids(run: Run) -> set[str]:
    """The cluster, its NodeSets and what they made: owners an object of ours may have."""
    uids = {run.raw["metadata"]["uid"]} | {s.raw["metadata"]["uid"] for s in run.node_sets}
    return uids | {obj["metadata"]["uid"] for obj in run.live.values() if obj is not None}


def _kept_by_us(current: dict, desired: dict) -> bool:
    """A claim kept on delete (render/shared_storage.py) has no owner by design, so that it
    outlives its SlurmCluster: a new cluster of the same name takes it back when it carries
    that cluster's labels and still has no owner (someone else's object would have one), also
    to own it from now on when keepOnDelete was turned off."""
    if desired["kind"] != "PersistentVolumeClaim":
        return False
    if current["metadata"].get("ownerReferences"):
        return False
    live_labels = current["metadata"].get("labels") or {}
    return all(live_labels.get(key) == value for key, value in desired["metadata"]["labels"].items())


def _refuse_foreign(current: dict, key: tuple[str, str], namespace: str, ours: set[str]) -> None:
    """Server-side apply takes any object over; an object someone else made is not ours to take.

    Ours: controlled by the cluster, one of its NodeSets, or one of their objects (a claim
    that a StatefulSet made from its template before the cluster owned it)."""
    refs = current["metadata"].get("ownerReferences") or []
    controllers = [ref for ref in refs if ref.get("controller")]
    owners = controllers or refs
    if any(ref.get("uid") in ours for ref in owners):
        return
    holder = (
        f"controlled by {owners[0].get('kind')} {owners[0].get('name')}" if owners
        else "not owned by this SlurmCluster (made by hand or by another tool)"
    )
    kind, name = key
    raise StepFailed(
        "Apply", "ObjectNotOurs",
        f"{kind} {namespace}/{name} already exists and is {holder}; the operator does not take it over: "
        "delete it, or rename the SlurmCluster or NodeSet whose object would have this name",
    )


def prune_undesired(api: KubeApi, events: EventRecorder, run: Run) -> None:
    namespace = run.cluster.metadata.namespace
    wanted = {_key(obj) for obj in run.desired}
    # What an invalid NodeSet made keeps running until its spec is fixed: pruning its
    # StatefulSet would kill its jobs over a typo.
    owners = {run.raw["metadata"]["uid"]} | {s.raw["metadata"]["uid"] for s in run.node_sets if s.error is None}
    listed = {kind.kind for kind in ownership.LISTED_KINDS}
    for (kind_name, name), obj in list(run.live.items()):
        if kind_name not in listed or (kind_name, name) in wanted or obj is None:
            continue
        if not {ref.get("uid") for ref in obj["metadata"].get("ownerReferences", [])} & owners:
            continue
        api.delete(ownership.kind_named(kind_name), namespace, name, uid=obj["metadata"]["uid"])
        del run.live[(kind_name, name)]
        events.normal(run.raw, "Pruned", f"deleted {kind_name} {name}: no longer desired")


def prune_device_plugin(api: KubeApi, events: EventRecorder, run: Run) -> None:
    """spec.bridge's device plugin objects go when the bridge is turned off.

    They are not among the kinds listed every reconcile (a list of DaemonSets, ServiceAccounts,
    Roles and RoleBindings for every cluster, bridged or not, to find four objects of a few):
    status.devicePluginDeployed records that they were applied, and only then are they read
    by name, deleted if the cluster owns them, and the record dropped."""
    name = device_plugin_name(run.cluster.metadata.name)
    if any(obj["kind"] == "DaemonSet" and obj["metadata"]["name"] == name for obj in run.desired):
        run.device_plugin_deployed = True
        return
    if not (run.raw.get("status") or {}).get("devicePluginDeployed"):
        return
    namespace, owner = run.cluster.metadata.namespace, run.raw["metadata"]["uid"]
    for kind_name in DEVICE_PLUGIN_KINDS:
        kind = ownership.kind_named(kind_name)
        obj = api.get(kind, namespace, name)
        if obj is None or owner not in {ref.get("uid") for ref in obj["metadata"].get("ownerReferences", [])}:
            continue
        api.delete(kind, namespace, name, uid=obj["metadata"]["uid"])
        events.normal(run.raw, "Pruned", f"deleted {kind_name} {name}: spec.bridge is off")
    run.device_plugin_deployed = False
