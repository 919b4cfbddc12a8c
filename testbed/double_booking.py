"""The double-booking sampler of the Slurm-scheduled pods' e2e (issue 18): once a second it
reads what Slurm and Kubernetes say of one bridged node, and records every moment when a GPU
had two holders or a bridged pod ran without its placeholder job.

A holder is a job RUNNING or COMPLETING on the node (`scontrol --details show job`: a
COMPLETING job still holds its GPUs, which is what the bridge's Epilog relies on; Slurm 24.11
no longer lists them then, so the indices seen while it ran are used) or a bridged
pod whose phase is Running on the node's Kubernetes node, with the GPUs it really has (its own
/dev, read once per pod). A violation is

- one GPU index in two jobs;
- a running bridged pod without its placeholder job (the job whose comment names the pod's UID)
  RUNNING or COMPLETING;
- a running pod's GPU held by another job, or by another running pod;
- a running pod with GPUs other than those of its placeholder job.

Slurm and Kubernetes are read one after the other, not at one instant. Jobs are read first;
a pod counts as running only when it was running in the previous sample's pod listing too,
so it ran throughout the moment the jobs were read: a pod bound and started between the two
reads (legitimately, after another job released its GPUs) is never mistaken for an overlap.

The reads are callables (the caller's kubectl exec and get), so the checks below are pure and
unit-tested (tests/unit/test_double_booking.py).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from kubeslurm.reconcile.job_allocation import parse_job_allocation
from kubeslurm.render.bridge.placeholder_job import COMMENT_PREFIX

HOLDING_STATES = frozenset({"RUNNING", "COMPLETING"})
_POD_UID = re.compile(r"\bComment=" + re.escape(COMMENT_PREFIX) + r"([0-9a-f-]{36})\b")
_JOB_NAME = re.compile(r"\bJobName=(\S*)")
MAX_VIOLATIONS = 100  # kept with what was seen; more are counted only


@dataclass(frozen=True)
class HeldJob:
    job_id: str
    state: str
    name: str
    pod_uid: str | None  # a placeholder job's pod (its comment)
    gpus: frozenset[int]  # on the sampled node
    remembered: bool = False  # COMPLETING and no longer listing its GPUs: those seen before

    def __str__(self) -> str:
        return f"job {self.job_id} {self.name} {self.state} GPUs {sorted(self.gpus)}"


@dataclass(frozen=True)
class RunningPod:
    name: str
    uid: str
    gpus: frozenset[int] | None  # None: not read yet (the pod would not answer)

    def __str__(self) -> str:
        return f"pod {self.name} GPUs {sorted(self.gpus) if self.gpus is not None else '?'}"


@dataclass(frozen=True)
class Violation:
    at: str  # UTC, when the jobs were read
    what: str
    seen: str


def held_jobs(scontrol_text: str, slurm_node: str, last_gpus: dict[str, frozenset[int]] | None = None) -> list[HeldJob]:
    """The jobs RUNNING or COMPLETING in `scontrol --details show job` (every job, blank lines
    between them), each with its GPU indices on slurm_node. last_gpus: job id -> indices seen
    before, used for a COMPLETING job that no longer lists them (and updated)."""
    last_gpus = {} if last_gpus is None else last_gpus
    jobs = []
    for record in re.split(r"\n\s*\n", scontrol_text):
        if "JobId=" not in record:
            continue
        allocation = parse_job_allocation(record)
        if allocation.state not in HOLDING_STATES:
            continue
        node = allocation.nodes.get(slurm_node)
        gpus = frozenset(node.gpu_indices) if node is not None else frozenset()
        remembered = not gpus and allocation.state == "COMPLETING" and allocation.job_id in last_gpus
        if gpus:
            last_gpus[allocation.job_id] = gpus
        elif remembered:
            gpus = last_gpus[allocation.job_id]
        uid, name = _POD_UID.search(record), _JOB_NAME.search(record)
        jobs.append(HeldJob(allocation.job_id, allocation.state, name.group(1) if name else "",
                            uid.group(1) if uid else None, gpus, remembered))
    return jobs


def violations(jobs: list[HeldJob], pods: list[RunningPod]) -> list[str]:
    """Every double booking among the holders of one node's GPUs (the module's docstring)."""
    found = []
    jobs_of: dict[int, list[HeldJob]] = {}
    for job in jobs:
        for index in job.gpus:
            jobs_of.setdefault(index, []).append(job)
    for index, holders in sorted(jobs_of.items()):
        if len(holders) > 1:
            found.append(f"GPU {index} held by {' and '.join(str(j) for j in holders)}")
    placeholder_of = {job.pod_uid: job for job in jobs if job.pod_uid}
    for pod in pods:
        own = placeholder_of.get(pod.uid)
        if own is None:
            found.append(f"{pod} runs without its placeholder job RUNNING or COMPLETING")
        if pod.gpus is None:
            continue
        if own is not None and own.gpus and pod.gpus != own.gpus:
            found.append(f"{pod} has other GPUs than its {own}")
        for job in jobs:
            if job is not own and pod.gpus & job.gpus:
                found.append(f"GPU {sorted(pod.gpus & job.gpus)} of {pod} also held by {job}")
    for position, pod in enumerate(pods):
        for other in pods[position + 1:]:
            if pod.gpus and other.gpus and pod.gpus & other.gpus:
                found.append(f"GPU {sorted(pod.gpus & other.gpus)} held by {pod} and {other}")
    return found


def running_pods_on(pods: list[dict], kubernetes_node: str) -> dict[str, dict]:
    """uid -> pod, for the pods bound to kubernetes_node whose phase is Running."""
    return {p["metadata"]["uid"]: p for p in pods
            if p.get("spec", {}).get("nodeName") == kubernetes_node and p.get("status", {}).get("phase") == "Running"}


@dataclass
class DoubleBookingSampler:
    """Samples once a second in a thread of its own from start() until stop().

    read_jobs() -> `scontrol --details show job` of every job; read_pods() -> the bridged pods
    (API objects); read_pod_gpus(pod) -> the GPU indices the pod has (None when it cannot tell)."""

    read_jobs: Callable[[], str]
    read_pods: Callable[[], list[dict]]
    read_pod_gpus: Callable[[dict], set[int] | None]
    slurm_node: str
    kubernetes_node: str
    interval: float = 1.0
    samples: int = 0
    failed_reads: list[str] = field(default_factory=list)
    found: list[Violation] = field(default_factory=list)
    violation_count: int = 0
    pods_seen_running: set[str] = field(default_factory=set)  # pod names
    jobs_seen_holding: set[str] = field(default_factory=set)  # job ids
    # pods seen running while their placeholder was COMPLETING: the Epilog's hold, the moment
    # a preempted pod's GPUs could be given out twice
    pods_seen_held_by_epilog: set[str] = field(default_factory=set)
    completing_gpus_listed: int = 0  # COMPLETING jobs whose GPUs scontrol listed
    completing_gpus_remembered: int = 0  # ... and those that no longer listed them
    _last_gpus: dict[str, frozenset[int]] = field(default_factory=dict)
    _pod_gpus: dict[str, frozenset[int]] = field(default_factory=dict)
    _previously_running: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _started_at: float | None = None

    def start(self) -> "DoubleBookingSampler":
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="double-booking-sampler", daemon=True)
        self._thread.start()
        return self

    def seconds_running(self) -> float:
        return 0.0 if self._started_at is None else time.monotonic() - self._started_at

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as error:  # a read that failed: said in the summary, sampling goes on
                if len(self.failed_reads) < MAX_VIOLATIONS:
                    self.failed_reads.append(f"{_now()}: {type(error).__name__}: {str(error).strip()[:300]}")
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def sample_once(self) -> None:
        at = _now()
        jobs = held_jobs(self.read_jobs(), self.slurm_node, self._last_gpus)
        running = running_pods_on(self.read_pods(), self.kubernetes_node)
        throughout = [uid for uid in running if uid in self._previously_running]
        self._previously_running = set(running)
        pods = [RunningPod(running[uid]["metadata"]["name"], uid, self._gpus_of(running[uid])) for uid in throughout]
        self.samples += 1
        self.pods_seen_running.update(p.name for p in pods)
        self.jobs_seen_holding.update(j.job_id for j in jobs)
        completing = {j.pod_uid for j in jobs if j.state == "COMPLETING" and j.pod_uid}
        self.pods_seen_held_by_epilog.update(p.name for p in pods if p.uid in completing)
        self.completing_gpus_listed += sum(1 for j in jobs if j.state == "COMPLETING" and j.gpus and not j.remembered)
        self.completing_gpus_remembered += sum(1 for j in jobs if j.remembered)
        seen = "; ".join([*(str(j) for j in jobs), *(str(p) for p in pods)]) or "nothing held"
        for what in violations(jobs, pods):
            self.violation_count += 1
            if len(self.found) < MAX_VIOLATIONS:
                self.found.append(Violation(at, what, seen))

    def _gpus_of(self, pod: dict) -> frozenset[int] | None:
        uid = pod["metadata"]["uid"]
        if uid not in self._pod_gpus:  # a container's devices do not change while it lives
            gpus = self.read_pod_gpus(pod)
            if gpus is None:
                return None
            self._pod_gpus[uid] = frozenset(gpus)
        return self._pod_gpus[uid]

    def report(self) -> str:
        lines = [f"{self.samples} samples, {self.violation_count} violations, {len(self.failed_reads)} failed reads; "
                 f"pods seen running: {sorted(self.pods_seen_running)}; jobs seen holding: {sorted(self.jobs_seen_holding, key=int)}; "
                 f"pods seen running on a COMPLETING job: {sorted(self.pods_seen_held_by_epilog)}; COMPLETING jobs' GPUs "
                 f"listed {self.completing_gpus_listed} times, remembered {self.completing_gpus_remembered}"]
        lines += [f"  {v.at} {v.what}\n      seen: {v.seen}" for v in self.found]
        lines += [f"  read failed {failure}" for failure in self.failed_reads[:10]]
        return "\n".join(lines)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
