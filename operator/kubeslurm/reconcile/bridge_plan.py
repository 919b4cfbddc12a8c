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

Pod groups (gang: pods labelled with one kubeslurm.io/pod-group and its size): one job of N
nodes for the N pods, asked for only once all N exist, so Slurm starts all of them or none; its
comment names every member's UID. When it runs, the members (by name) are bound to its nodes
(in order), one pod per node, each after the hold file on its own node. A group runs whole or
not at all: a member gone or deleting, or a job that ended, cancels the job and deletes every
member still bound; the job is released once none of them can run any more. The members left
(their controller makes the lost ones again) wait for the group to be whole, then get a new job.
A member that finished (a worker done) leaves the others running; the job ends with the last.
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
    group: str | None = None  # its kubeslurm.io/pod-group: one job for the group's pods
    group_size: int = 0  # the pods the group waits for (kubeslurm.io/pod-group-size)


@dataclass(frozen=True)
class PodGroup:
    """The pods of one group in one namespace, by name: what one group job is submitted for."""
    namespace: str
    name: str
    members: tuple[BridgedPod, ...]


@dataclass(frozen=True)
class PlaceholderState:
    job_id: str
    state: str
    pod_uid: str  # a group's job: its first member's
    nodes: tuple[str, ...] = ()
    reason: str = ""
    group_uids: tuple[str, ...] = ()  # a group's job: every member's UID; () for one pod's

    @property
    def uids(self) -> tuple[str, ...]:
        return self.group_uids or (self.pod_uid,)


@dataclass(frozen=True)
class Binding:
    pod: BridgedPod
    job_id: str
    slurm_nodes: tuple[str, ...]  # where the hold file goes first
    kubernetes_node: str


@dataclass
class BridgePlan:
    submit: list[BridgedPod] = field(default_factory=list)
    submit_groups: list[PodGroup] = field(default_factory=list)
    bind: list[Binding] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)
    delete_pods: list[BridgedPod] = field(default_factory=list)
    release: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    pending: list[tuple[BridgedPod, str]] = field(default_factory=list)  # PodScheduled messages to write
    # Some placeholder holds resources (RUNNING or COMPLETING): Slurm may end it at any moment
    # (preemption), so its pod must be looked at again soon. Not part of what is to be done.
    placeholders_held: bool = field(default=False, compare=False)
    # Jobs sbatch accepted when the plan was carried out (bridge_sync): a refused pod is asked
    # again at the next run, not within a second. Not part of what is to be done.
    submitted: int = field(default=0, compare=False)

    @property
    def empty(self) -> bool:
        return not (self.submit or self.submit_groups or self.bind or self.cancel or self.delete_pods or self.release
                    or self.pending)


def pending_message(job: PlaceholderState) -> str:
    return f"Slurm job {job.job_id} pending: {job.reason or 'None'}"


def plan_bridge(pods: list[BridgedPod], jobs: list[PlaceholderState], kubernetes_node_of: dict[str, str]) -> BridgePlan:
    """kubernetes_node_of: Slurm node name (= slurmd pod name) -> the Kubernetes node it runs on."""
    plan = BridgePlan(placeholders_held=any(job.state in (RUNNING_STATE, ENDING_STATE) for job in jobs))
    by_pod: dict[str, list[PlaceholderState]] = {}
    group_jobs: list[PlaceholderState] = []
    for job in sorted(jobs, key=lambda j: int(j.job_id)):
        if job.group_uids:
            group_jobs.append(job)
        else:
            by_pod.setdefault(job.pod_uid, []).append(job)
    pod_uids = {pod.uid for pod in pods}
    # Kubernetes nodes with a GPU pod bound but not admitted yet: nothing more is bound there.
    admitting = {pod.node_name for pod in pods if pod.node_name and pod.gpus and not pod.admitted and not pod.deleting}

    for uid, pod_jobs in by_pod.items():
        if uid not in pod_uids:  # the pod is gone: nothing of it can run any more
            for job in pod_jobs:
                _end(plan, job, pod_gone=True)

    groups: dict[tuple[str, str], list[BridgedPod]] = {}
    for pod in pods:
        if pod.group is not None:
            groups.setdefault((pod.namespace, pod.group), []).append(pod)
    _plan_group_jobs(plan, group_jobs, {pod.uid: pod for pod in pods if pod.group is not None},
                     kubernetes_node_of, admitting)
    for (namespace, name), members in sorted(groups.items()):
        _plan_group(plan, PodGroup(namespace, name, tuple(sorted(members, key=lambda p: p.name))), group_jobs)

    for pod in sorted((p for p in pods if p.group is None), key=lambda p: (p.namespace, p.name)):
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


def _member_done(pod: BridgedPod | None) -> bool:
    """Nothing of this member runs or will: gone from the API, finished, or deleting while unbound."""
    return pod is None or pod.finished or (pod.deleting and pod.node_name is None)


def _plan_group_jobs(plan: BridgePlan, group_jobs: list[PlaceholderState], members: dict[str, BridgedPod],
                     kubernetes_node_of: dict[str, str], admitting: set[str]) -> None:
    """Each group job against the members it names: bind them while it runs whole, else end it.

    A member that finished (its containers exited: a worker done) leaves the others running; the
    job ends once every member has finished. A member gone or deleting breaks the group."""
    for job in group_jobs:
        named = [members.get(uid) for uid in job.group_uids]
        done = all(_member_done(pod) for pod in named)
        broken = any(pod is None or pod.deleting for pod in named)
        if job.state in WAITING_STATES and not broken:
            continue  # _plan_group shows why the members wait
        if job.state == RUNNING_STATE and not broken and not done and len(job.nodes) == len(named):
            for pod, node in zip(sorted(named, key=lambda p: p.name), sorted(job.nodes)):
                if not pod.finished:
                    _bind_or_check(plan, pod, PlaceholderState(job.job_id, job.state, pod.uid, (node,)),
                                   kubernetes_node_of, admitting)
            continue
        # Broken, every member finished, ended, or not N nodes: the group runs whole or not at all.
        for pod in named:
            if pod is not None and pod.node_name is not None and not pod.deleting and not pod.finished:
                plan.delete_pods.append(pod)
        _end(plan, job, pod_gone=done)


def _plan_group(plan: BridgePlan, group: PodGroup, group_jobs: list[PlaceholderState]) -> None:
    """A group without a live job: submit it once whole; until then say why its pods wait."""
    uids = {pod.uid for pod in group.members}
    live = [job for job in group_jobs if uids & set(job.group_uids) and job.state not in ENDED_STATES]
    unbound = [pod for pod in group.members if pod.node_name is None and not pod.deleting and not pod.finished]
    if live:
        job = live[0]
        if job.state in WAITING_STATES and set(job.group_uids) <= uids:
            for pod in unbound:
                if pod.pending_message != pending_message(job):
                    plan.pending.append((pod, pending_message(job)))
        return  # running: bound by _plan_group_jobs; broken: being ended there
    for pod in group.members:
        # bound without a running job: Slurm no longer holds what it uses (unless its ended job's pass deletes it)
        if pod.node_name is not None and not pod.deleting and not pod.finished and pod not in plan.delete_pods:
            plan.delete_pods.append(pod)
    waiting = [pod for pod in group.members if not pod.deleting and not pod.finished]
    if not waiting:
        return  # every member finished or is going (a Job's workers done): nothing to ask for
    message = group_problem(group, waiting)
    if message is None and len(waiting) == len(unbound):
        plan.submit_groups.append(PodGroup(group.namespace, group.name, tuple(waiting)))
        return
    for pod in unbound:
        shown = message or f"Slurm job for pod group {group.name}: waiting for its bound pods to go"
        if pod.pending_message != shown:
            plan.pending.append((pod, shown))


def group_problem(group: PodGroup, waiting: list[BridgedPod]) -> str | None:
    """Why the group's job cannot be asked for yet, or None once it can."""
    problem = next((pod.problem for pod in waiting if pod.problem), None)
    if problem is not None:
        return problem
    sizes = {pod.group_size for pod in waiting}
    if len(sizes) > 1:
        return (f"not scheduled by Slurm: the pods of group {group.name} give different sizes "
                f"({', '.join(map(str, sorted(sizes)))}) in kubeslurm.io/pod-group-size: give them one")
    size = sizes.pop() if sizes else 0
    if len(waiting) < size:
        return f"pod group {group.name}: {len(waiting)} of {size} pods exist; its Slurm job is asked for once all do"
    if len(waiting) > size:
        return (f"not scheduled by Slurm: pod group {group.name} has {len(waiting)} pods but "
                f"kubeslurm.io/pod-group-size says {size}")
    if len({pod.gpus for pod in waiting}) > 1:
        return (f"not scheduled by Slurm: the pods of group {group.name} ask for different numbers of "
                f"kubeslurm.io/gpu: a group is one Slurm job with the same resources on each of its nodes")
    return None


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
