"""Why pods are not running, in words a person can act on: for the Ready condition's message.

Pure: the pods the reconcile listed go in (ObserveKubernetes reads them anyway), one line
comes out, pods with the same problem named together: "h100-1, h100-2 Pending: 0/3 nodes
are available: 3 Insufficient cpu." Only what Kubernetes says is repeated (the scheduler's
message, the kubelet's waiting reason), so the text stays short and true.
"""

# Waiting reasons of a container that will not fix themselves (ContainerCreating and
# PodInitializing will, so they are not problems).
STUCK_REASONS = {
    "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CrashLoopBackOff",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
}
MAX_MESSAGE = 300  # per problem: a condition message is for reading, not for a full log


def pod_problem(pod: dict) -> str | None:
    """What keeps this pod from running, or None."""
    status = pod.get("status") or {}
    if status.get("phase") == "Pending" and not (pod.get("spec") or {}).get("nodeName"):
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if scheduled is None or scheduled.get("status") != "False":
            return "Pending: not scheduled yet"
        return f"Pending: {_short(scheduled.get('message') or scheduled.get('reason') or 'unschedulable')}"
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in STUCK_REASONS:
            continue
        problem = f"container {container['name']} {waiting['reason']}"
        terminated = (container.get("lastState") or {}).get("terminated")
        if waiting["reason"] == "CrashLoopBackOff" and terminated:
            problem += f" (last exit code {terminated.get('exitCode')}, {terminated.get('reason', 'Error')})"
        elif waiting.get("message"):
            problem += f": {_short(waiting['message'])}"
        return problem
    return None


def pod_problems(pods: list[dict]) -> str:
    """Every problem of these pods, each once with the pods that have it; "" when none has one."""
    by_problem: dict[str, list[str]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        problem = pod_problem(pod)
        if problem:
            by_problem.setdefault(problem, []).append(pod["metadata"]["name"])
    return "; ".join(f"{', '.join(names)} {problem}" for problem, names in by_problem.items())


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
