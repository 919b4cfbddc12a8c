"""The operator's own pods as their watch last saw them: what a reconcile reads instead of a list.

At 1000 slurmd pods one list of them is ~6 MB of JSON, which the API server encodes and the
operator decodes at every reconcile: ~0.7 s of a 0.94 s no-op reconcile and ~25 MiB allocated
for a moment (make bench-scale, issue 16). The owned-pods watch (filtered_watch.py) decodes every
change of those pods anyway, one at a time; here each is kept, cut to what a reconcile reads,
and the reconcile's pod reads are answered from memory (ClusterReconciler.read_pods).

What is kept of a pod: its metadata without managedFields, its status, and its spec without
the bulky parts no reconcile step reads (volumes, init containers, tolerations, affinity; each
container's name and image only). Pods handed out are shared with the cache: read them, never
change them. Each change replaces the pod's entry whole, so a reader never sees one half-changed.

Like an informer's cache in client-go: answers only for namespaces whose watch has listed
(until then, or without a watch, the reconcile lists); a relist replaces everything in its
scope; a watch that restarts goes on from its last version, and the events it missed meanwhile
arrive then, so the cache may lag the API server by that long, never diverge from it.
"""

from __future__ import annotations

import threading

SPEC_NOT_KEPT = frozenset({"volumes", "initContainers", "ephemeralContainers", "tolerations", "affinity",
                           "topologySpreadConstraints", "securityContext", "dnsConfig", "hostAliases"})
CONTAINER_KEPT = ("name", "image")


def kept_of(pod: dict) -> dict:
    """The part of a pod the cache keeps (see the module's docstring)."""
    metadata = {k: v for k, v in (pod.get("metadata") or {}).items() if k != "managedFields"}
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k not in SPEC_NOT_KEPT}
    if "containers" in spec:
        spec["containers"] = [{k: c[k] for k in CONTAINER_KEPT if k in c} for c in spec["containers"]]
    return {"apiVersion": pod.get("apiVersion", "v1"), "kind": pod.get("kind", "Pod"),
            "metadata": metadata, "spec": spec, "status": pod.get("status") or {}}


def equality_selector(selector: str) -> dict[str, str]:
    """`k=v,k2=v2` -> {k: v, k2: v2}: the only form the reconcile selects its pods by (ownership.cluster_selector)."""
    labels = {}
    for term in selector.split(","):
        key, sign, value = term.partition("=")
        if not sign or not key or any(c in term for c in "!()") or value.startswith("="):
            raise ValueError(f"pod cache: only k=v label selectors are served, not {selector!r}")
        labels[key.strip()] = value.strip()
    return labels


class PodCache:
    """(namespace, name) -> pod, kept by the owned-pods watch of each scope (a namespace, or None: all)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], dict] = {}
        self._listed_scopes: set[str | None] = set()

    # ---- written by the watch ------------------------------------------------
    def replace(self, scope: str | None, pods: list[dict]) -> None:
        """A list of `scope`: it is what the scope holds now, and the scope is answered from here on."""
        kept = {(p["metadata"]["namespace"], p["metadata"]["name"]): kept_of(p) for p in pods}
        with self._lock:
            self._pods = {key: pod for key, pod in self._pods.items() if scope is not None and key[0] != scope}
            self._pods.update(kept)
            self._listed_scopes.add(scope)

    def changed(self, event_type: str, pod: dict) -> None:
        """One watch event: ADDED and MODIFIED keep the pod as it is now, DELETED forgets it."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if event_type == "DELETED":
            with self._lock:
                # A newer pod of the same name (a StatefulSet's, made again) is not the one deleted.
                if (kept := self._pods.get(key)) is not None and kept["metadata"].get("uid") == meta.get("uid"):
                    del self._pods[key]
            return
        kept = kept_of(pod)
        with self._lock:
            self._pods[key] = kept

    # ---- read by the reconcile -----------------------------------------------
    def answers_for(self, namespace: str) -> bool:
        with self._lock:
            return None in self._listed_scopes or namespace in self._listed_scopes

    def pods(self, namespace: str, selector: str) -> list[dict] | None:
        """The pods of `namespace` whose labels match `selector` (k=v,...), by name; None while
        this namespace's watch has not listed (ask the API server)."""
        wanted = equality_selector(selector).items()
        with self._lock:
            if None not in self._listed_scopes and namespace not in self._listed_scopes:
                return None
            found = [pod for (ns, _), pod in self._pods.items()
                     if ns == namespace and wanted <= (pod["metadata"].get("labels") or {}).items()]
        return sorted(found, key=lambda pod: pod["metadata"]["name"])

    def pod(self, namespace: str, name: str) -> dict | None:
        with self._lock:
            return self._pods.get((namespace, name))

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
