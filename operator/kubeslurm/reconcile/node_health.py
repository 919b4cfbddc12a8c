"""Kubernetes node trouble becomes a Slurm drain, and only our drains are undone.

A slurmd pod on a NotReady or cordoned Kubernetes node should get no new jobs.
We drain its Slurm node with a reason that starts with `kubeslurm:`; when the
Kubernetes node is healthy again we resume only nodes whose reason we wrote.
A drain set by a human (any other reason) is never touched.
"""

from .slurm_control import OPERATOR_REASON_PREFIX, SlurmNode

HEALTH_REASON = "kubernetes node"


def kubernetes_node_trouble(node: dict | None) -> str | None:
    if node is None:
        return None
    name = node["metadata"]["name"]
    if node.get("spec", {}).get("unschedulable"):
        return f"{HEALTH_REASON} {name} is cordoned"
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return f"{HEALTH_REASON} {name} is not Ready"
    return None


def health_actions(pods: list[dict], k8s_nodes: dict[str, dict], slurm_nodes: dict[str, SlurmNode]) -> tuple[dict[str, str], list[str]]:
    """(Slurm node -> drain reason, Slurm nodes to resume)."""
    drain: dict[str, str] = {}
    resume: list[str] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        slurm = slurm_nodes.get(name)
        if slurm is None:
            continue
        trouble = kubernetes_node_trouble(k8s_nodes.get(pod["spec"].get("nodeName", "")))
        ours = slurm.reason.startswith(f"{OPERATOR_REASON_PREFIX} {HEALTH_REASON}")
        if trouble and not slurm.drained:
            drain[name] = trouble
        elif not trouble and slurm.drained and ours:
            resume.append(name)
    return drain, sorted(resume)
