"""What to do about Slurm-scheduled pods and their placeholder jobs: a pure decision.

Inputs are one listing of the bridged pods and one of the placeholder jobs (squeue); the output
is the list of actions that brings them into line (docs/design/slurm-scheduled-pods.md, the
table under "Ending, preemption, sweep, restart"). Nothing is remembered between runs: an
operator restarted in the middle decides the same from the same Slurm and Kubernetes state.

The rules, each for a reason:
- a pod without a job gets one; a pod with several (a submission repeated after a crash)
  keeps the oldest and the others are cancelled;
- a job that runs gets its pod bound to the Kubernetes node of the allocated slurmd pod,
  after the hold file is written on that node (the caller re-reads the job before binding);
- a bound pod may exist only while its job RUNS (whatever the pod's readiness): a job that
  ended, was preempted or is gone has its pod deleted;
- a pod that is deleting or finished has its job cancelled; the job's resources are released
  (hold file removed) only once no container of the pod can run any more: the pod is gone
  from the API or its phase is Succeeded/Failed;
- a job whose pod is gone is cancelled, and released once it completes (the orphan sweep);
- at most one GPU pod per Kubernetes node is bound and not yet admitted by the kubelet: the
  device-plugin API does not say which pod the kubelet allocates devices for, so the kubeslurm
  device plugin must have exactly one candidate to hand its recorded GPU indices to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# squeue states of a job that has not started yet, and of one that runs.
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
RUNNING_STATE = "RUNNING"
ENDING_STATE = "COMPLETING"
# Ended and released: nothing holds anything (squeue lists these only until MinJobAge).
ENDED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                          "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT"})


@dataclass(frozen=True)
class BridgedPod:
    namespace: str
    name: str
    uid: str
    node_name: str | None = None  # spec.nodeName: bound
    deleting: bool = False  # metadata.deletionTimestamp set
    finished: bool = False  # phase Succeeded or Failed: none of its containers runs any more
    pending_message: str | None = None  # the PodScheduled=False message it shows now
    problem: str | None = None  # why no job can be asked for it (e.g. no memory request): shown, not submitted
    gpus: int = 0  # kubeslurm.io/gpu it asks for
    admitted: bool = False  # the kubelet has accepted it (container statuses, or a phase past Pending)


@dataclass(frozen=True)
class PlaceholderState:
    job_id: str
    state: str
    pod_uid: str
    nodes: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class Binding:
    pod: BridgedPod
    job_id: str
    slurm_nodes: tuple[str, ...]  # where the hold file goes first
    kubernetes_node: str


@dataclass
class BridgePlan:
    submit: list[BridgedPod] = field(default_factory=list)
    bind: list[Binding] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)
    delete_pods: list[BridgedPod] = field(default_factory=list)
    release: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    pending: list[tuple[BridgedPod, str]] = field(default_factory=list)  # PodScheduled messages to write

    @property
    def empty(self) -> bool:
        return not (self.submit or self.bind or self.cancel or self.delete_pods or self.release or self.pending)


def pending_message(job: PlaceholderState) -> str:
    return f"Slurm job {job.job_id} pending: {job.reason or 'None'}"


def plan_bridge(pods: list[BridgedPod], jobs: list[PlaceholderState], kubernetes_node_of: dict[str, str]) -> BridgePlan:
    """kubernetes_node_of: Slurm node name (= slurmd pod name) -> the Kubernetes node it runs on."""
    plan = BridgePlan()
    by_pod: dict[str, list[PlaceholderState]] = {}
    for job in sorted(jobs, key=lambda j: int(j.job_id)):
        by_pod.setdefault(job.pod_uid, []).append(job)
    pod_uids = {pod.uid for pod in pods}
    # Kubernetes nodes with a GPU pod bound but not admitted yet: nothing more is bound there.
    admitting = {pod.node_name for pod in pods if pod.node_name and pod.gpus and not pod.admitted and not pod.deleting}

    for uid, pod_jobs in by_pod.items():
        if uid not in pod_uids:  # the pod is gone: nothing of it can run any more
            for job in pod_jobs:
                _end(plan, job, pod_gone=True)

    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        pod_jobs = by_pod.get(pod.uid, [])
        job, extra = (pod_jobs[0], pod_jobs[1:]) if pod_jobs else (None, [])
        for duplicate in extra:
            _end(plan, duplicate, pod_gone=pod.node_name is None or duplicate.nodes != job.nodes)
        if pod.deleting or pod.finished:
            if job is not None:
                _end(plan, job, pod_gone=pod.finished or pod.node_name is None)
            continue
        if job is None:
            if pod.node_name is None and pod.problem is not None:
                if pod.pending_message != pod.problem:
                    plan.pending.append((pod, pod.problem))
            elif pod.node_name is None:
                plan.submit.append(pod)
            else:  # bound without a running job: Slurm no longer holds what it uses
                plan.delete_pods.append(pod)
            continue
        if job.state in WAITING_STATES:
            if pod.node_name is None and pod.pending_message != pending_message(job):
                plan.pending.append((pod, pending_message(job)))
            continue
        if job.state == RUNNING_STATE:
            _bind_or_check(plan, pod, job, kubernetes_node_of, admitting)
            continue
        # the job ended (scancel, preemption, time limit, node failure) while its pod lives
        if pod.node_name is not None:
            plan.delete_pods.append(pod)
        else:
            _end(plan, job, pod_gone=True)  # never bound: nothing of it runs anywhere
    return plan


def _bind_or_check(plan: BridgePlan, pod: BridgedPod, job: PlaceholderState, kubernetes_node_of: dict[str, str],
                   admitting: set[str]) -> None:
    if len(job.nodes) != 1:  # a pod is one node; pod groups (one job, N pods) come later
        plan.cancel.append(job.job_id)
        return
    target = kubernetes_node_of.get(job.nodes[0])
    if pod.node_name is None:
        if target is not None and not (pod.gpus and target in admitting):
            plan.bind.append(Binding(pod, job.job_id, job.nodes, target))
            if pod.gpus:
                admitting.add(target)
        # else: the slurmd pod is not scheduled (yet); it is a node of Slurm's only once it runs
    elif target is not None and pod.node_name != target:
        plan.delete_pods.append(pod)  # bound elsewhere than its allocation: never run it there


def _end(plan: BridgePlan, job: PlaceholderState, *, pod_gone: bool) -> None:
    """Cancel a job that still waits or holds; release a completing one once its pod is gone."""
    if job.state == ENDING_STATE:
        if pod_gone:
            plan.release.append((job.job_id, job.nodes))
    elif job.state not in ENDED_STATES:  # waiting, running, suspended, ...
        plan.cancel.append(job.job_id)
