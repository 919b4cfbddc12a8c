"""A Slurm-scheduled pod as the bridge sees it: its state, and what its placeholder job asks for.

Pure functions of the pod object as the API server returns it. The job asks for what the
kubelet will reserve for the pod: per resource, the larger of the sum over its containers and
the largest init container (Kubernetes' effective request), CPUs rounded up to whole CPUs
(Slurm allocates whole CPUs), memory rounded up to MiB, GPUs from `kubeslurm.io/gpu`.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from ..api.bridge import BridgedNamespace
from ..api.quantity import parse_quantity
from ..render.bridge.placeholder_job import PlaceholderRequest
from .bridge_plan import BridgedPod

GPU_RESOURCE = "kubeslurm.io/gpu"
MEBIBYTE = Decimal(2) ** 20
# A gang: pods with the same group label (in one namespace) become one Slurm job of SIZE nodes.
POD_GROUP_LABEL = "kubeslurm.io/pod-group"
POD_GROUP_SIZE_ANNOTATION = "kubeslurm.io/pod-group-size"
MAX_POD_GROUP_SIZE = 64  # every member's UID goes into the job's comment
_GROUP_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def pod_group(pod: dict) -> tuple[str, int] | None:
    """(group, size) of a pod labelled kubeslurm.io/pod-group; None for a pod on its own.
    ValueError says what to fix in the label or the size annotation."""
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
    if name is None:
        return None
    if not _GROUP_NAME.fullmatch(name):
        raise ValueError(f"label {POD_GROUP_LABEL}={name!r} must be a DNS label (lowercase letters, digits and '-')")
    size = (meta.get("annotations") or {}).get(POD_GROUP_SIZE_ANNOTATION, "")
    if not size.isdigit() or not 1 <= int(size) <= MAX_POD_GROUP_SIZE:
        raise ValueError(f"a pod of group {name} needs annotation {POD_GROUP_SIZE_ANNOTATION}: the number of pods "
                         f"in the group, 1 to {MAX_POD_GROUP_SIZE} (it is {size!r})")
    return name, int(size)


def _requests(container: dict) -> dict:
    resources = container.get("resources") or {}
    # Extended resources may be given as limits only; the API server then copies them to requests.
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def effective_requests(pod: dict) -> dict[str, Decimal]:
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in _requests(container).items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    for container in spec.get("initContainers") or []:
        for name, value in _requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), parse_quantity(value))
    return total


def placeholder_request(pod: dict, mapping: BridgedNamespace, bridged_nodes_only: bool = False) -> PlaceholderRequest:
    """The job of POD under its namespace's MAPPING. ValueError says what the pod must set.
    bridged_nodes_only: the cluster has a bridged NodeSet (bridged_nodes.bridged_nodes_only)."""
    requests = effective_requests(pod)
    if "memory" not in requests:
        raise ValueError("set resources.requests.memory on the pod's containers: Slurm allocates memory per job")
    gpus = requests.get(GPU_RESOURCE, Decimal(0))
    if gpus != gpus.to_integral_value():
        raise ValueError(f"{GPU_RESOURCE} must be a whole number")
    meta = pod["metadata"]
    return PlaceholderRequest(
        namespace=meta["namespace"], pod_name=meta["name"], pod_uid=meta["uid"],
        account=mapping.account, user=mapping.user, qos=mapping.qos, partition=mapping.partition,
        cpus=max(1, math.ceil(requests.get("cpu", Decimal(1)))),
        memory_mib=max(1, math.ceil(requests["memory"] / MEBIBYTE)),
        gpus=int(gpus), bridged_nodes_only=bridged_nodes_only,
    )


def unmapped_problem(namespace: str, cluster_namespace: str, cluster_name: str) -> str:
    return (f"not scheduled by Slurm: namespace {namespace} is not in spec.bridge.namespaces of SlurmCluster "
            f"{cluster_namespace}/{cluster_name}: add it there with the Slurm account and user its pods run as, "
            f"or remove schedulerName from the pod to use the default scheduler")


def bridged_pod(pod: dict, mapping: BridgedNamespace | None, unmapped: str | None = None) -> BridgedPod:
    """mapping: the pod's namespace's entry in spec.bridge.namespaces; None (a namespace without
    one): the pod gets `unmapped` as its problem, shown on it, and no job."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    gpus, problem, group = 0, None, None
    try:
        group = pod_group(pod)
    except ValueError as error:
        problem = f"not scheduled by Slurm: {error}"
    if mapping is None:
        problem = unmapped
    elif problem is None:
        try:
            gpus = placeholder_request(pod, mapping).gpus
        except ValueError as error:
            problem = f"not scheduled by Slurm: {error}"
    return BridgedPod(
        namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
        node_name=spec.get("nodeName") or None,
        deleting=bool(meta.get("deletionTimestamp")),
        finished=status.get("phase") in ("Succeeded", "Failed"),
        pending_message=scheduled.get("message") if scheduled.get("status") == "False" else None,
        problem=problem,
        gpus=gpus,
        # The kubelet allocates devices when it admits a pod, and reports containers right after.
        admitted=bool(status.get("containerStatuses")) or status.get("phase") in ("Running", "Succeeded", "Failed"),
        group=group[0] if group else None,
        group_size=group[1] if group else 0,
    )
