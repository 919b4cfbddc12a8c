"""Which watch events are worth a reconcile: those that change what a reconcile reads.

kopf hands over every event of a SlurmCluster, a NodeSet or a Kubernetes node. Many change
nothing a reconcile looks at:
- the operator's own status writes to its SlurmClusters and NodeSets (each reconcile that
  changed something would otherwise wake one more reconcile that finds nothing to do, and
  every NodeSet event cost a GET of its cluster);
- a kubelet's periodic node status (heartbeat times, images, volumes in use): at 1000 nodes,
  each reporting every few minutes, several events a second, each waking every cluster's
  reconcile, which would run back to back on an idle site.

Like controller-runtime's GenerationChangedPredicate, but for the fields kubeslurm reads: a
digest per object of those fields, and an event passes when its object's digest differs from
the one last seen (the first event of an object always passes, and so does a deletion, which
forgets the object; a relist's event of an object seen unchanged does not). The periodic resync
reconciles anyway, so a change this missed would wait at most RESYNC_SECONDS; it cannot miss one
the digest holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any

Digest = Callable[[Mapping], Hashable]  # equal for two events that change nothing a reconcile reads


def custom_resource_digest(body: Mapping) -> tuple:
    """A SlurmCluster or NodeSet: what its owner changes (spec, through metadata.generation, which
    the API server bumps on every spec change and on deletion), labels, annotations, finalizers
    and the deletion itself; not status, which only the operator writes."""
    meta = body.get("metadata") or {}
    return (meta.get("generation"), _frozen(meta.get("labels")), _frozen(meta.get("annotations")),
            tuple(meta.get("finalizers") or ()), meta.get("deletionTimestamp"))


def kubernetes_node_digest(body: Mapping) -> tuple:
    """A Kubernetes node: what decides drains, replacement and where bridged NodeSets fit
    (node_health.py, cluster_reconcile.py): labels, annotations (the drain annotation), the
    spec (cordon, taints), each condition's type, status, reason and message, and allocatable;
    not heartbeat times, images or volumes in use."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    conditions = tuple(sorted((c.get("type") or "", c.get("status") or "", c.get("reason") or "", c.get("message") or "")
                              for c in status.get("conditions") or ()))
    return (_frozen(meta.get("labels")), _frozen(meta.get("annotations")), _frozen(body.get("spec")), conditions,
            _frozen(status.get("allocatable")))


class ChangeFilter:
    """The digests last seen, by object uid; changed() says whether an event is worth a reconcile.

    What is kept is the digest's hash (a 64-bit int), not the digest: a real node's labels and
    annotations are kilobytes, and a site has thousands of nodes. Two different digests with the
    same hash (about 2**-64 for a given pair) would miss one change until the next resync.
    """

    def __init__(self, digest: Digest):
        self.digest = digest
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def changed(self, event_type: str | None, body: Mapping) -> bool:
        uid = (body.get("metadata") or {}).get("uid") or ""
        if event_type == "DELETED":
            with self._lock:
                self._seen.pop(uid, None)
            return True
        digest = hash(self.digest(body))
        with self._lock:
            before = self._seen.get(uid)
            self._seen[uid] = digest
        return before != digest

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)


def _frozen(value: Any) -> Any:
    """A hashable, comparable copy of a JSON value (dict keys sorted)."""
    if isinstance(value, Mapping):
        return tuple(sorted((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value
