"""What Slurm allocated to a job: `scontrol --details show job <id>` for one, squeue for the placeholders.

The bridge needs more than squeue prints: which GPUs of each node the job holds (GRES
indices), so that the pod gets exactly those device files and no others. Slurm 24.11 prints
them per node, one line per group of nodes with the same layout:

    Nodes=gpu-0 CPU_IDs=0-1 Mem=512 GRES=gpu:a100:2(IDX:1-2)

An index is the position of the GPU in the node's gres.conf File= list, which kubeslurm
renders from the device files of the slurmd pod (/dev/nvidia0.. in order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..render.bridge.placeholder_job import COMMENT_PREFIX, GROUP_COMMENT_PREFIX, GROUP_JOB_NAME_PREFIX, JOB_NAME_PREFIX
from .bridge_plan import PlaceholderState
from .slurm_hostlist import expand

_NODE_LINE = re.compile(r"\bNodes=(\S+) CPU_IDs=(\S*) Mem=(\d+) GRES=(\S*)")
_GPU_INDICES = re.compile(r"\bgpu(?::[^:(,\s]+)?:\d+\(IDX:([0-9,-]*)\)")
_FIELD = re.compile(r"\b(JobId|JobState|Reason|NodeList)=(\S*)")


@dataclass(frozen=True)
class NodeAllocation:
    cpu_ids: str
    memory_mib: int
    gpu_indices: tuple[int, ...] = ()


@dataclass(frozen=True)
class JobAllocation:
    job_id: str
    state: str
    reason: str = ""
    nodes: dict[str, NodeAllocation] = field(default_factory=dict)


def _indices(spec: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return tuple(out)


def parse_job_allocation(text: str) -> JobAllocation:
    """One job's state and, once it runs, its nodes with their CPUs, memory and GPU indices."""
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(text):
        fields.setdefault(key, value)
    if "JobId" not in fields or "JobState" not in fields:
        raise ValueError(f"not the output of `scontrol show job`: {text.strip()[:200]!r}")
    nodes: dict[str, NodeAllocation] = {}
    for hostlist, cpu_ids, memory, gres in _NODE_LINE.findall(text):
        gpus = tuple(index for match in _GPU_INDICES.findall(gres) for index in _indices(match))
        for node in expand(hostlist):
            nodes[node] = NodeAllocation(cpu_ids, int(memory), gpus)
    return JobAllocation(fields["JobId"], fields["JobState"], fields.get("Reason", ""), nodes)


_UID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PLACEHOLDER_LINE = re.compile(
    r"^(?P<id>[0-9]+)\|(?P<state>[A-Z_]+)\|(?P<nodes>[^|]*)\|(?P<reason>[^|]*)\|(?:"
    + re.escape(JOB_NAME_PREFIX) + r"[a-z0-9-]+/[a-z0-9.-]+\|" + re.escape(COMMENT_PREFIX) + rf"(?P<uid>{_UID})"
    + "|" + re.escape(GROUP_JOB_NAME_PREFIX) + r"[a-z0-9-]+/[a-z0-9-]+\|" + re.escape(GROUP_COMMENT_PREFIX)
    + rf"(?P<uids>{_UID}(?:,{_UID})*))$"
)


def parse_placeholder_lines(text: str) -> list[PlaceholderState]:
    """The placeholder jobs among squeue's lines (SQUEUE_PLACEHOLDER_FORMAT); other jobs of the
    bridge's users are skipped."""
    jobs = []
    for line in text.splitlines():
        match = _PLACEHOLDER_LINE.match(line.strip())
        if match:
            nodes = match["nodes"]
            group = tuple(match["uids"].split(",")) if match["uids"] else ()
            jobs.append(PlaceholderState(match["id"], match["state"], match["uid"] or group[0],
                                         tuple(expand(nodes)) if nodes else (), match["reason"], group))
    return jobs
