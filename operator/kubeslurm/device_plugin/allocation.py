"""What the kubeslurm device plugin answers the kubelet: pure decisions over the placement record.

The plugin advertises one `kubeslurm.io/gpu` device per GPU of its node, device ID
`gpu-<index>` (the Slurm GRES index: the position in gres.conf's File= list). The kubelet
asks which devices it prefers for a container (GetPreferredAllocation) and then allocates
(Allocate), without saying for which pod. So the operator binds at most one GPU pod per node
that the kubelet has not admitted yet (bridge_plan), and the candidates here are the recorded
placements on this node whose pods are not admitted yet: normally exactly one.

- preferred: exactly the candidate's devices when one candidate fits the request; otherwise
  no preference (the kubelet picks, and Allocate refuses what it picked).
- check: an allocation is accepted only if it is exactly one candidate's devices. A pod that
  kubeslurm did not place, or devices other than Slurm's, fail the pod's admission.
"""

from __future__ import annotations

from ..render.bridge.placements import Placement

DEVICE_PREFIX = "gpu-"


class AllocationRefused(ValueError):
    pass


def device_id(index: int) -> str:
    return f"{DEVICE_PREFIX}{index}"


def device_ids(placement: Placement) -> list[str]:
    return [device_id(i) for i in sorted(placement.gpu_indices)]


def candidates(placements: list[Placement], kubernetes_node: str, admitted_pod_uids: set[str]) -> list[Placement]:
    """Placements on this node whose pods the kubelet has not admitted yet."""
    return [p for p in placements if p.kubernetes_node == kubernetes_node and p.pod_uid not in admitted_pod_uids]


def preferred(candidates_: list[Placement], available: list[str], must_include: list[str], size: int) -> list[str]:
    fitting = [
        c for c in candidates_
        if len(c.gpu_indices) == size and set(device_ids(c)) <= set(available) and set(must_include) <= set(device_ids(c))
    ]
    return device_ids(fitting[0]) if len(fitting) == 1 else []


def check(candidates_: list[Placement], requested: list[str]) -> Placement:
    """The placement the kubelet is allocating for; AllocationRefused says why there is none."""
    matching = [c for c in candidates_ if device_ids(c) == sorted(requested, key=_index_order)]
    if len(matching) == 1:
        return matching[0]
    if not candidates_:
        raise AllocationRefused("kubeslurm.io/gpu is given only to pods Slurm placed (schedulerName kubeslurm-<cluster>); "
                                "no such pod is waiting on this node")
    if not matching:
        wanted = ", ".join(f"{c.namespace}/{c.name}: {device_ids(c)}" for c in candidates_)
        raise AllocationRefused(f"devices {sorted(requested)} are not the GPUs Slurm allocated ({wanted})")
    raise AllocationRefused(f"devices {sorted(requested)} match several waiting pods; the operator binds one at a time")


def _index_order(device: str) -> tuple[int, str]:
    suffix = device[len(DEVICE_PREFIX):]
    return (int(suffix), device) if device.startswith(DEVICE_PREFIX) and suffix.isdigit() else (1 << 30, device)
