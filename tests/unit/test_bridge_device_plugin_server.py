"""The kubeslurm device plugin's gRPC server (device_plugin/server.py) against the stand-in
kubelet: a real gRPC server and client over unix sockets, real character devices in a temp
folder, the placement record as the operator writes it (placement_data -> read_placements).
What is proven: it registers kubeslurm.io/gpu and advertises one device per /dev/nvidiaN; it
prefers and allocates exactly the GPUs Slurm gave the waiting pod on this node, handing over
those device files under their own names; it refuses other GPUs, pods kubeslurm did not place,
and everything while the record cannot be read. (The real kubelet: cluster tier, not yet.)"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("grpc_tools")

from kubeslurm.device_plugin.protocol import load_stubs  # noqa: E402
from kubeslurm.device_plugin.server import RESOURCE, KubeslurmGpuPlugin, gpu_indices  # noqa: E402
from kubeslurm.render.bridge.placements import Placement, placement_data, read_placements  # noqa: E402
from testbed.local_cluster.fake_gpu.plugin import make_device_nodes  # noqa: E402
from tests.stand_in_kubelet import StandInKubelet  # noqa: E402

NODE = "kubeslurm-2"
WEB = Placement("0f5c1e9a-1111-4a6b-9c1d-2e3f4a5b6c7d", "inference", "web-7d9f", NODE, "812", (1, 2))
ELSEWHERE = Placement("0f5c1e9a-2222-4a6b-9c1d-2e3f4a5b6c7d", "inference", "web-x1y2", "kubeslurm-3", "813", (0, 1))


@pytest.fixture
def stubs(tmp_path):
    return load_stubs(tmp_path / "cache")


@pytest.fixture
def device_dir(tmp_path):
    """A node's /dev: nvidia0..3 as the driver makes them (c 195 N), nvidiactl, and two things
    that are not GPUs (a regular file named like one, a device of another name)."""
    dev = tmp_path / "dev"
    make_device_nodes(dev, 4)
    os.mknod(dev / "nvidiactl", 0o666 | stat.S_IFCHR, os.makedev(195, 255))
    (dev / "nvidia7").write_text("not a device")
    os.mknod(dev / "nvidia-modeset", 0o666 | stat.S_IFCHR, os.makedev(195, 254))
    return dev


class Record:
    """The ConfigMap's data as the operator writes it; tests change it between calls."""

    def __init__(self, placements):
        self.data, self.broken = placement_data(placements), None

    def __call__(self):
        if self.broken:
            raise self.broken
        return read_placements(self.data)


@pytest.fixture
def served(stubs, device_dir, tmp_path):
    """(pb2, stub, record, registration) with the plugin registered with the stand-in kubelet."""
    pb2, pb2_grpc = stubs
    plugin_dir = Path(tmp_path) / "dp"  # short: unix socket paths are limited to 107 bytes
    plugin_dir.mkdir()
    kubelet = StandInKubelet(stubs, plugin_dir)
    record = Record([WEB, ELSEWHERE])
    plugin = KubeslurmGpuPlugin(pb2, pb2_grpc, kubernetes_node=NODE, device_dir=device_dir,
                                plugin_dir=plugin_dir, placements=record)
    runner = threading.Thread(target=plugin.run, daemon=True)
    runner.start()
    try:
        assert kubelet.registered.wait(15), "the plugin never registered"
        registration = kubelet.requests[0]
        with grpc.insecure_channel(f"unix://{plugin_dir / registration.endpoint}") as channel:
            yield pb2, pb2_grpc.DevicePluginStub(channel), record, registration
    finally:
        plugin.stop()
        runner.join(10)
        kubelet.stop()
    assert not runner.is_alive()
    assert not (plugin_dir / registration.endpoint).exists()


def _allocate(pb2, stub, devices):
    return stub.Allocate(pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(devices_ids=devices)]))


def test_gpu_indices_are_the_nvidia_character_devices(device_dir):
    assert gpu_indices(device_dir) == [0, 1, 2, 3]
    assert gpu_indices(device_dir / "absent") == []


def test_registers_kubeslurm_gpus_and_advertises_one_device_per_gpu(served):
    pb2, stub, _record, registration = served
    assert (registration.version, registration.resource_name) == ("v1beta1", RESOURCE)
    assert registration.options.get_preferred_allocation_available
    stream = stub.ListAndWatch(pb2.Empty())
    devices = next(stream).devices
    stream.cancel()
    assert [(d.ID, d.health) for d in devices] == [(f"gpu-{i}", "Healthy") for i in range(4)]


def test_the_waiting_pod_gets_exactly_the_gpus_slurm_allocated(served, device_dir):
    pb2, stub, _record, _registration = served
    preferred = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=["gpu-3", "gpu-2", "gpu-1", "gpu-0"],
                                                allocation_size=2)]))
    assert list(preferred.container_responses[0].deviceIDs) == ["gpu-1", "gpu-2"]

    (container,) = _allocate(pb2, stub, ["gpu-2", "gpu-1"]).container_responses
    assert [(d.container_path, d.host_path, d.permissions) for d in container.devices] == [
        ("/dev/nvidia1", str(device_dir / "nvidia1"), "rw"),
        ("/dev/nvidia2", str(device_dir / "nvidia2"), "rw"),
        ("/dev/nvidiactl", str(device_dir / "nvidiactl"), "rw"),
    ]
    assert dict(container.envs) == {"NVIDIA_VISIBLE_DEVICES": "1,2", "KUBESLURM_GPU_INDICES": "1,2",
                                    "KUBESLURM_SLURM_JOB_ID": "812"}


def test_other_gpus_than_slurm_s_are_refused_with_the_pod_they_belong_to(served):
    pb2, stub, _record, _registration = served
    with pytest.raises(grpc.RpcError) as refused:
        _allocate(pb2, stub, ["gpu-0", "gpu-1"])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not the GPUs Slurm allocated" in refused.value.details()
    assert "inference/web-7d9f" in refused.value.details()
    # Too few devices is no better: the pod's whole allocation or nothing.
    with pytest.raises(grpc.RpcError):
        _allocate(pb2, stub, ["gpu-1"])


def test_a_pod_kubeslurm_did_not_place_gets_nothing(served):
    pb2, stub, record, _registration = served
    record.data = placement_data([ELSEWHERE])  # nothing waits on this node
    preferred = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=["gpu-0", "gpu-1"], allocation_size=2)]))
    assert list(preferred.container_responses[0].deviceIDs) == []
    with pytest.raises(grpc.RpcError) as refused:
        _allocate(pb2, stub, ["gpu-0", "gpu-1"])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "only to pods Slurm placed" in refused.value.details()


def test_an_unreadable_record_refuses_every_allocation(served):
    pb2, stub, record, _registration = served
    record.broken = ConnectionRefusedError("API server unreachable")
    with pytest.raises(grpc.RpcError) as refused:
        _allocate(pb2, stub, ["gpu-1", "gpu-2"])
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "API server unreachable" in refused.value.details()
    record.broken = None
    assert _allocate(pb2, stub, ["gpu-1", "gpu-2"]).container_responses[0].envs["KUBESLURM_SLURM_JOB_ID"] == "812"
