"""A slurmd that Slurm still counts on but whose pod is gone for good: DOWN at once.

A slurmd pod stopped the normal way runs its preStop hook, which marks its Slurm node
DOWN, and Slurm requeues the node's jobs right away. When the hook never ran (its
Kubernetes node lost or deleted, the pod force-deleted or garbage-collected) Slurm
learns nothing: the new pod under the same name registers with the host's boot time
(pods share the kernel, so slurmctld sees no reboot) and the old jobs read RUNNING
until Slurm gives up on them many minutes later. The operator sees what Slurm cannot:

- the pod is gone while Slurm has jobs on its node;
- the pod is bound to a Kubernetes node that no longer exists;
- the pod was created after a job on its node started: that job cannot be in it;
- the pod's slurmd container (re)started after a job on its node started: the container
  crashed or was OOM-killed and the kubelet restarted it in place, and the job's steps died
  with it (they run in the container's PID namespace). The new slurmd registers without
  them, and slurmctld, seeing no reboot, would count them RUNNING until their time limit.

Each marks the Slurm node DOWN with a reason starting `kubeslurm: slurmd pod lost`, so
Slurm requeues (or ends, per the job's --requeue) its jobs now. Kubernetes' word that a
pod is gone is taken as final, as the StatefulSet controller does: a force-deleted pod
on a partitioned node may still run, and is then the site's own fencing problem.

Clocks: job start times come from slurmctld, pod creation times from the API server;
both are assumed NTP-synced. A job can start on a pod only after that pod's slurmd has
started and registered, seconds after the pod was created, so a skew below that cannot
mistake a live job for a lost one.

Once the pod under that name is Ready on a live Kubernetes node and no lost job remains,
the node is resumed: ReturnToService=2 lifts the DOWN only when slurmd registers after
it, and never a DRAIN that was there before (a NotReady Kubernetes node drains first).
Requeued jobs start again after AuthInfo's cred_expire (60 s here) at the main
scheduler's next pass (sched_interval, 60 s).
"""

from datetime import datetime

from ..render.slurmd.statefulset import LOST_REASON
from .slurm_access import pod_ready
from .slurm_control import OPERATOR_REASON_PREFIX, SlurmJob, SlurmNode, jobs_holding

SLURMD_CONTAINER = "slurmd"


def _created(pod: dict) -> float | None:
    stamp = pod["metadata"].get("creationTimestamp")
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


def _slurmd_started(pod: dict) -> float | None:
    """When the pod's running slurmd container started (None: not running, or unknown)."""
    for status in pod.get("status", {}).get("containerStatuses", []):
        if status.get("name") == SLURMD_CONTAINER:
            stamp = status.get("state", {}).get("running", {}).get("startedAt")
            return datetime.fromisoformat(stamp).timestamp() if stamp else None
    return None


def why_lost(name: str, pod: dict | None, k8s_nodes: dict[str, dict], jobs: list[SlurmJob]) -> str | None:
    """Why the slurmd that Slurm knows as `name` cannot be running any more; None when it may be."""
    if not jobs:
        return None
    ids = ",".join(job.id for job in jobs)
    if pod is None:
        return f"{LOST_REASON}: pod {name} is gone (jobs {ids})"
    host = pod["spec"].get("nodeName")
    if host and host not in k8s_nodes:
        return f"{LOST_REASON}: Kubernetes node {host} is gone (jobs {ids})"
    created = _created(pod)
    older = [job.id for job in jobs if job.start is not None and created is not None and job.start < created]
    if older:
        return f"{LOST_REASON}: pod {name} was replaced after jobs {','.join(older)} started on it"
    started = _slurmd_started(pod)
    older = [job.id for job in jobs if job.start is not None and started is not None and job.start < started]
    if older:
        return f"{LOST_REASON}: slurmd of pod {name} restarted after jobs {','.join(older)} started on it"
    return None


def lost_slurmd_actions(
    pods: list[dict], k8s_nodes: dict[str, dict], slurm_nodes: dict[str, SlurmNode], jobs: list[SlurmJob]
) -> tuple[dict[str, str], list[str]]:
    """(Slurm node -> DOWN reason, Slurm nodes to resume) for the slurmd pods of one cluster.

    Empty listings are no evidence: an API server that answers with no pods or no nodes
    while Slurm runs jobs is more likely wrong than every node lost at once, and a
    replaced pod is still caught by its creation time once the listing is back.
    """
    if not pods or not k8s_nodes:
        return {}, []
    by_pod = {pod["metadata"]["name"]: pod for pod in pods}
    jobs_by_node = jobs_holding(jobs)
    down: dict[str, str] = {}
    resume: list[str] = []
    for name, slurm in sorted(slurm_nodes.items()):
        pod = by_pod.get(name)
        reason = why_lost(name, pod, k8s_nodes, jobs_by_node.get(name, []))
        is_down = "DOWN" in slurm.states
        if reason and not is_down:
            down[name] = reason
        elif (
            # DOWN over a drain keeps the DRAIN flag, and ReturnToService lifts only the DOWN
            not reason and (is_down or slurm.drained) and slurm.reason.startswith(f"{OPERATOR_REASON_PREFIX} {LOST_REASON}")
            and pod_ready(pod) and pod["spec"].get("nodeName") in k8s_nodes
            and "NOT_RESPONDING" not in slurm.states
        ):
            resume.append(name)
    return down, resume
