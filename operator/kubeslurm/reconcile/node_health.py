"""Trouble seen from Kubernetes becomes a Slurm drain, and only our drains are undone.

A slurmd pod should get no new jobs while
- its Kubernetes node is NotReady or cordoned,
- its Kubernetes node has one of spec.nodeHealth.drainOnNodeConditions (a
  node-problem-detector's GPUProblem=True, say),
- its Kubernetes node or the pod itself carries the annotation kubeslurm.io/drain-reason
  (how an external tool or a person drains through Kubernetes).
We drain its Slurm node with a reason that starts with `kubeslurm: kubernetes node` or
`kubeslurm: pod`; when the trouble is gone we resume only nodes whose reason we wrote
that way. A drain set by a human, by the scale-down or by the image's health check
(`kubeslurm: health check: ...`) is never touched here.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from ..api.node_health import NodeCondition
from .slurm_access import pod_ready
from .slurm_control import OPERATOR_REASON_PREFIX, SlurmNode

HEALTH_REASON = "kubernetes node"
NOT_READY = "is not Ready"
POD_REASON = "pod"
DRAIN_ANNOTATION = "kubeslurm.io/drain-reason"
OUR_REASONS = tuple(f"{OPERATOR_REASON_PREFIX} {kind} " for kind in (HEALTH_REASON, POD_REASON))
# Slurm keeps a reason whole, but people read it in `sinfo -R`: one line, not a novel.
MAX_TEXT = 200


@dataclass(frozen=True)
class HealthActions:
    drain: dict[str, str]  # Slurm node -> reason (without the kubeslurm: prefix)
    resume: list[str]


def one_line(text: str) -> str:
    """Text from outside (an annotation, a condition's message) as one printable line."""
    first = next(iter(str(text).splitlines()), "")
    return "".join(ch if ch.isprintable() else " " for ch in first).strip()[:MAX_TEXT]


def _annotation(obj: dict) -> str | None:
    value = (obj.get("metadata", {}).get("annotations") or {}).get(DRAIN_ANNOTATION)
    if value is None:
        return None
    return one_line(value) or "no reason given"


def kubernetes_node_trouble(node: dict | None, conditions: Iterable[NodeCondition] = ()) -> str | None:
    if node is None:
        return None
    name = node["metadata"]["name"]
    if node.get("spec", {}).get("unschedulable"):
        return f"{HEALTH_REASON} {name} is cordoned"
    ready = next((c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        return f"{HEALTH_REASON} {name} {NOT_READY}"
    return reported_trouble(node, conditions)


def reported_trouble(node: dict, conditions: Iterable[NodeCondition] = ()) -> str | None:
    """Trouble someone reported on a Kubernetes node (a listed condition, the annotation), as
    opposed to its state: the scheduler still places pods there, so replacement avoids it."""
    name = node["metadata"]["name"]
    present = {c.get("type"): c for c in node.get("status", {}).get("conditions", [])}
    for wanted in conditions:
        condition = present.get(wanted.type)
        if condition is not None and condition.get("status") == wanted.status:
            message = one_line(condition.get("message") or condition.get("reason") or "")
            return f"{HEALTH_REASON} {name} has {wanted.type}={wanted.status}" + (f": {message}" if message else "")
    annotation = _annotation(node)
    if annotation is not None:
        return f"{HEALTH_REASON} {name} {DRAIN_ANNOTATION}: {annotation}"
    return None


def pod_trouble(pod: dict) -> str | None:
    annotation = _annotation(pod)
    if annotation is None:
        return None
    return f"{POD_REASON} {pod['metadata']['name']} {DRAIN_ANNOTATION}: {annotation}"


def drained_by_kubernetes_trouble(slurm: SlurmNode) -> bool:
    return slurm.drained and slurm.reason.startswith(OUR_REASONS)


def health_actions(
    pods: list[dict], k8s_nodes: dict[str, dict], slurm_nodes: dict[str, SlurmNode],
    conditions: Iterable[NodeCondition] = (),
) -> HealthActions:
    """What to drain (with why) and resume. A node drained by us for other trouble than
    now is drained again with the new reason, so `sinfo -R` always says the current one."""
    conditions = tuple(conditions)
    drain: dict[str, str] = {}
    resume: list[str] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        slurm = slurm_nodes.get(name)
        if slurm is None:
            continue
        trouble = kubernetes_node_trouble(k8s_nodes.get(pod["spec"].get("nodeName", "")), conditions) or pod_trouble(pod)
        ours = drained_by_kubernetes_trouble(slurm)
        if trouble and (not slurm.drained or (ours and slurm.reason != f"{OPERATOR_REASON_PREFIX} {trouble}")):
            drain[name] = trouble
        elif not trouble and ours and pod_ready(pod):
            # Not before its pod is Ready: a replaced pod still Pending has no node to judge, and
            # resuming a DOWN node whose slurmd has not registered would only lose the drain.
            resume.append(name)
    return HealthActions(drain, sorted(resume))
