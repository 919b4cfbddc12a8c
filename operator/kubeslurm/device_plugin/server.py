"""The kubeslurm device plugin's gRPC server: a bridged node's GPUs as `kubeslurm.io/gpu`, each
given only to the pod Slurm allocated it to (docs/design/slurm-scheduled-pods.md, "GPUs").

One device per GPU of the node, ID `gpu-<index>`, index = N of the node's /dev/nvidiaN = the
Slurm GRES index (gres.conf's File= list is rendered from /dev/nvidia0..N-1 of the slurmd pod
that holds all the node's GPUs). The kubelet asks which devices a container should get
(GetPreferredAllocation) and then allocates them (Allocate) without naming the pod; the answers
come from allocation.py over the placement record the operator writes (a ConfigMap of the
cluster's namespace, render/bridge/placements.py), read afresh on every call: the operator
writes a pod's entry before it binds the pod, so the record is never older than the admission.

Allocate refuses (the pod fails admission with this message) any request that is not exactly
the devices of one recorded placement waiting on this node, and refuses when the record cannot
be read: handing out a GPU Slurm did not allocate would double-book it, refusing only delays a
pod. The container gets the device files of exactly those indices under their own names
(/dev/nvidia1 stays /dev/nvidia1: the indices the job's SLURM_JOB_GPUS would name), plus the
driver's control devices when the node has them.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from ..render.bridge.placements import Placement, read_placements
from . import allocation
from .protocol import DevicePluginLifecycle

RESOURCE = "kubeslurm.io/gpu"
SOCKET_NAME = "kubeslurm-gpu.sock"
_GPU_DEVICE = re.compile(r"^nvidia(\d+)$")
# What CUDA opens besides the GPUs' own files; every container with a GPU needs them.
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")

log = logging.getLogger("kubeslurm.device_plugin")


def gpu_indices(device_dir: Path) -> list[int]:
    """The N of every character device nvidiaN in device_dir (the node's /dev), in order."""
    indices = []
    for entry in device_dir.iterdir() if device_dir.is_dir() else ():
        match = _GPU_DEVICE.match(entry.name)
        if match and stat.S_ISCHR(entry.lstat().st_mode):
            indices.append(int(match.group(1)))
    return sorted(indices)


class ConfigMapPlacements:
    """The placement record as the operator last wrote it: the ConfigMap's data, read on each call.
    No ConfigMap yet means no placements (every request refused), not an error."""

    def __init__(self, core_v1, namespace: str, name: str):
        self.core_v1, self.namespace, self.name = core_v1, namespace, name

    def __call__(self) -> list[Placement]:
        from kubernetes.client.exceptions import ApiException

        try:
            config_map = self.core_v1.read_namespaced_config_map(self.name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return []
            raise
        return read_placements(config_map.data)


class KubeslurmGpuPlugin(DevicePluginLifecycle):
    def __init__(self, pb2, pb2_grpc, *, kubernetes_node: str, device_dir: Path, plugin_dir: Path,
                 placements: Callable[[], list[Placement]],
                 admitted_pod_uids: Callable[[], set[str]] = set):
        super().__init__(pb2, pb2_grpc, resource=RESOURCE, plugin_dir=plugin_dir, socket_name=SOCKET_NAME)
        self.kubernetes_node = kubernetes_node
        self.device_dir = device_dir
        self.placements = placements
        # Pods the kubelet already admitted (their placements are no longer candidates). Until the
        # pod-resources check is built this is empty: Slurm's indices on one node are disjoint
        # while held, so an exact match still names one placement.
        self.admitted_pod_uids = admitted_pod_uids

    def _candidates(self) -> list[Placement]:
        return allocation.candidates(self.placements(), self.kubernetes_node, self.admitted_pod_uids())

    # -- DevicePlugin service --------------------------------------------------

    def ListAndWatch(self, request, context):
        devices = [self.pb2.Device(ID=allocation.device_id(i), health="Healthy")
                   for i in gpu_indices(self.device_dir)]
        log.info("ListAndWatch: advertising %s", [d.ID for d in devices])
        yield self.pb2.ListAndWatchResponse(devices=devices)
        # GPUs do not come and go on a running node; a new one needs a plugin restart.
        self.keep_stream_open(context)

    def GetPreferredAllocation(self, request, context):
        try:
            candidates = self._candidates()
        except Exception as error:  # the kubelet then picks, and Allocate refuses what it picked
            log.warning("GetPreferredAllocation: placement record unreadable: %s", error)
            candidates = []
        responses = [
            self.pb2.ContainerPreferredAllocationResponse(deviceIDs=allocation.preferred(
                candidates, list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size))
            for req in request.container_requests
        ]
        return self.pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        import grpc

        try:
            candidates = self._candidates()
        except Exception as error:
            log.warning("Allocate refused: placement record unreadable: %s", error)
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"kubeslurm: the placement record cannot be read, so no GPU is given out: {error}")
        responses = []
        for req in request.container_requests:
            try:
                placement = allocation.check(candidates, list(req.devices_ids))
            except allocation.AllocationRefused as refused:
                log.warning("Allocate refused %s: %s", list(req.devices_ids), refused)
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"kubeslurm: {refused}")
            responses.append(self._container_response(placement))
        return self.pb2.AllocateResponse(container_responses=responses)

    def _container_response(self, placement: Placement):
        indices = sorted(placement.gpu_indices)
        names = [f"nvidia{i}" for i in indices] + [n for n in CONTROL_DEVICES if (self.device_dir / n).exists()]
        specs = [self.pb2.DeviceSpec(container_path=f"/dev/{name}", host_path=str(self.device_dir / name),
                                     permissions="rw") for name in names]
        envs = {
            # The NVIDIA container runtime takes indices; without it the device files decide.
            "NVIDIA_VISIBLE_DEVICES": ",".join(str(i) for i in indices),
            "KUBESLURM_SLURM_JOB_ID": placement.job_id,
            "KUBESLURM_GPU_INDICES": ",".join(str(i) for i in indices),
        }
        log.info("Allocate %s/%s (Slurm job %s): %s", placement.namespace, placement.name, placement.job_id, names)
        return self.pb2.ContainerAllocateResponse(envs=envs, devices=specs)


def run(*, cluster: str, namespace: str, kubernetes_node: str, device_dir: Path, plugin_dir: Path) -> int:
    """The DaemonSet's entry point (`kubeslurm device-plugin`): in-cluster credentials, serves
    until SIGTERM."""
    import signal

    from kubernetes import client, config

    from ..render.bridge.placements import placements_config_map_name
    from .protocol import load_stubs

    logging.basicConfig(level=logging.INFO, format="%(asctime)s kubeslurm-device-plugin %(levelname)s %(message)s")
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    pb2, pb2_grpc = load_stubs()
    placements = ConfigMapPlacements(client.CoreV1Api(), namespace, placements_config_map_name(cluster))
    plugin = KubeslurmGpuPlugin(pb2, pb2_grpc, kubernetes_node=kubernetes_node, device_dir=device_dir,
                                plugin_dir=plugin_dir, placements=placements)
    signal.signal(signal.SIGTERM, plugin.stop)
    signal.signal(signal.SIGINT, plugin.stop)
    plugin.run()
    return 0
