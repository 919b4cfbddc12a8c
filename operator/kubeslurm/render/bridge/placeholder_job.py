"""The placeholder job of a Slurm-scheduled pod: its sbatch, scancel, hold and release commands.

A pod with `schedulerName: kubeslurm-<cluster>` becomes one batch job that asks Slurm for the
pod's CPUs, memory and GPUs, charged to its namespace's account, user, QOS and partition
(spec.bridge). Its batch step only sleeps: the job exists to hold the allocation while the pod
uses it. When the job ends for any reason, slurmd runs the bridge Epilog
(images/slurm/bridge-epilog.sh), which keeps the job COMPLETING, and its node closed to new
allocations, for as long as the job's hold file exists; the operator writes that file before it
binds the pod and removes it once the pod is gone. So Slurm never hands the pod's GPUs to
another job while the pod may still run on them.

Every function is pure and returns argv (never a shell string); every value that reaches an
argv is checked against a pattern here, whatever the caller checked before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubeslurm.api.bridge import BRIDGED_FEATURE
from kubeslurm.api.names import DNS_SUBDOMAIN_PATTERN, NAMESPACE_PATTERN, SLURM_NAME_PATTERN, UNIX_USER_PATTERN

# Root-owned, on the slurmd pod: the Epilog waits while <job id> exists here.
HOLD_DIR = "/run/kubeslurm/bridge/holds"
# The batch step holds the allocation and does nothing else: a constant, never built from a pod.
PLACEHOLDER_SCRIPT = "exec sleep infinity"
# squeue/sacct show it; the operator finds a pod's job by it (with the pod's UID in the comment).
JOB_NAME_PREFIX = "kubeslurm-pod:"
COMMENT_PREFIX = "kubeslurm.io/pod-uid="
# A pod group's one job (gang): named after the group, its comment the members' UIDs, comma-separated.
GROUP_JOB_NAME_PREFIX = "kubeslurm-group:"
GROUP_COMMENT_PREFIX = "kubeslurm.io/pod-uids="
MAX_GROUP_MEMBERS = 64
_GROUP_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_UID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_JOB_ID_PATTERN = r"^[1-9][0-9]{0,9}$"


@dataclass(frozen=True)
class PlaceholderRequest:
    """What one pod asks of Slurm and on whose behalf (its namespace's spec.bridge mapping)."""
    namespace: str
    pod_name: str
    pod_uid: str
    account: str
    user: str
    cpus: int
    memory_mib: int
    gpus: int = 0
    qos: str | None = None
    partition: str | None = None
    # The cluster has a bridged NodeSet: the job may run only on its nodes (Features=kubeslurm_bridged),
    # the Kubernetes nodes dedicated to the bridge, never on a node other pods are scheduled to.
    bridged_nodes_only: bool = False
    # A pod group: one job of len(group_uids) nodes, one member per node, each with the
    # resources above; pod_name/pod_uid are then its first member's.
    group: str | None = None
    group_uids: tuple[str, ...] = ()


def _checked(value: str, pattern: str, what: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise ValueError(f"{what} {value!r} does not match {pattern}")
    return value


def _job_id(job_id: str) -> str:
    return _checked(str(job_id), _JOB_ID_PATTERN, "Slurm job id")


def job_name(namespace: str, pod_name: str) -> str:
    return f"{JOB_NAME_PREFIX}{namespace}/{pod_name}"


def group_job_name(namespace: str, group: str) -> str:
    return f"{GROUP_JOB_NAME_PREFIX}{namespace}/{group}"


def _identity(r: PlaceholderRequest) -> list[str]:
    """Job name, comment and shape: one pod on one node, or a group on one node per member."""
    if r.group is None:
        return [f"--job-name={job_name(r.namespace, r.pod_name)}", f"--comment={COMMENT_PREFIX}{r.pod_uid}",
                "--nodes=1", "--ntasks=1"]
    _checked(r.group, _GROUP_PATTERN, "pod group")
    if not 1 <= len(r.group_uids) <= MAX_GROUP_MEMBERS or len(set(r.group_uids)) != len(r.group_uids):
        raise ValueError(f"a pod group has 1 to {MAX_GROUP_MEMBERS} distinct members, not {len(r.group_uids)}")
    for uid in r.group_uids:
        _checked(uid, _UID_PATTERN, "pod uid")
    return [f"--job-name={group_job_name(r.namespace, r.group)}", f"--comment={GROUP_COMMENT_PREFIX}{','.join(r.group_uids)}",
            f"--nodes={len(r.group_uids)}", "--ntasks-per-node=1"]


def sbatch_argv(request: PlaceholderRequest) -> list[str]:
    """sbatch, run as root on the controller, submitting the placeholder as the mapped user.

    One node, one task with the pod's CPUs (a group: a node and a task per member); --no-requeue because a pod whose job ended is
    evicted and its controller (Deployment, Job) makes a new pod with a new job; output to
    /dev/null because the step prints nothing and the service user may have no home."""
    r = request
    _checked(r.namespace, NAMESPACE_PATTERN, "namespace")
    _checked(r.pod_name, DNS_SUBDOMAIN_PATTERN, "pod name")
    _checked(r.pod_uid, _UID_PATTERN, "pod uid")
    _checked(r.account, SLURM_NAME_PATTERN, "account")
    _checked(r.user, UNIX_USER_PATTERN, "user")
    for what, count, least in (("cpus", r.cpus, 1), ("memory_mib", r.memory_mib, 1), ("gpus", r.gpus, 0)):
        if not isinstance(count, int) or isinstance(count, bool) or count < least:
            raise ValueError(f"{what} must be an integer of at least {least}, not {count!r}")
    argv = [
        "sbatch", "--parsable",
        f"--uid={r.user}", f"--account={r.account}", *_identity(r),
        f"--cpus-per-task={r.cpus}", f"--mem={r.memory_mib}M",
    ]
    if r.gpus:
        argv.append(f"--gres=gpu:{r.gpus}")
    if r.qos is not None:
        argv.append(f"--qos={_checked(r.qos, SLURM_NAME_PATTERN, 'qos')}")
    if r.partition is not None:
        argv.append(f"--partition={_checked(r.partition, SLURM_NAME_PATTERN, 'partition')}")
    if r.bridged_nodes_only:
        argv.append(f"--constraint={BRIDGED_FEATURE}")
    return [*argv, "--no-requeue", "--chdir=/", "--output=/dev/null", f"--wrap={PLACEHOLDER_SCRIPT}"]


# One line per job: id|state|nodes|reason|name|comment; the two free-text fields last and
# matched in full by PLACEHOLDER_LINE, so a job that is not a placeholder never reads as one.
SQUEUE_PLACEHOLDER_FORMAT = "%i|%T|%N|%r|%j|%k"


def squeue_placeholders_argv(users: list[str]) -> list[str]:
    """The jobs of the bridge's users (spec.bridge.namespaces[].user), every partition."""
    names = sorted({_checked(u, UNIX_USER_PATTERN, "user") for u in users})
    if not names:
        raise ValueError("no bridge user to list jobs of")
    return ["squeue", "--noheader", "--all", f"--user={','.join(names)}", f"--format={SQUEUE_PLACEHOLDER_FORMAT}"]


def scancel_argv(job_id: str) -> list[str]:
    """Cancel the placeholder (pod deleted): its resources stay held until release_argv runs."""
    return ["scancel", _job_id(job_id)]


def hold_path(job_id: str) -> str:
    return f"{HOLD_DIR}/{_job_id(job_id)}"


def hold_argv(job_id: str) -> list[str]:
    """Run as root in the slurmd container of every node of the job, before the pod is bound:
    from then on the job's end waits for release_argv. (`install -D` makes the root-owned
    directories on first use.)"""
    return ["install", "-D", "-m", "0600", "/dev/null", hold_path(job_id)]


def release_argv(job_id: str) -> list[str]:
    """Run as root in the same containers once the pod is gone: the Epilog returns, Slurm frees
    the job's CPUs, memory and GPUs."""
    return ["rm", "-f", hold_path(job_id)]
