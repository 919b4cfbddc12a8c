"""The fake GPU device plugin against a stand-in kubelet: registration, the
device list, and what Allocate hands back (the real kubelet is in tests/cluster)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("grpc_tools")

from testbed.local_cluster.fake_gpu.plugin import FakeGpuPlugin, load_stubs  # noqa: E402
from tests.stand_in_kubelet import StandInKubelet  # noqa: E402


@pytest.fixture
def stubs(tmp_path):
    return load_stubs(tmp_path / "cache")


def test_registers_and_allocates_renumbered_devices(stubs, tmp_path):
    pb2, pb2_grpc = stubs
    # Short paths: unix socket names are limited to 107 bytes.
    plugin_dir = Path(tmp_path) / "dp"
    plugin_dir.mkdir()
    kubelet = StandInKubelet(stubs, plugin_dir)
    plugin = FakeGpuPlugin(pb2, pb2_grpc, node_name="n1", count=4, device_dir=tmp_path / "dev",
                           plugin_dir=plugin_dir)
    runner = threading.Thread(target=plugin.run, daemon=True)
    runner.start()
    try:
        assert kubelet.registered.wait(15), "the plugin never registered"
        req = kubelet.requests[0]
        assert (req.version, req.resource_name) == ("v1beta1", "nvidia.com/gpu")
        assert (plugin_dir / req.endpoint).exists()
        assert req.options.get_preferred_allocation_available

        with grpc.insecure_channel(f"unix://{plugin_dir / req.endpoint}") as channel:
            stub = pb2_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(pb2.Empty())
            first = next(stream)
            ids = [d.ID for d in first.devices]
            assert ids == [f"GPU-fake-n1-{i}" for i in range(4)]
            assert {d.health for d in first.devices} == {"Healthy"}
            stream.cancel()

            preferred = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
                pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids[::-1],
                                                        must_include_deviceIDs=[ids[3]], allocation_size=2)]))
            assert list(preferred.container_responses[0].deviceIDs) == [ids[3], ids[0]]

            resp = stub.Allocate(pb2.AllocateRequest(container_requests=[
                pb2.ContainerAllocateRequest(devices_ids=[ids[3], ids[1]])]))
            (container,) = resp.container_responses
            assert [(d.container_path, Path(d.host_path).name, d.permissions) for d in container.devices] == [
                ("/dev/nvidia0", "nvidia1", "rw"),
                ("/dev/nvidia1", "nvidia3", "rw"),
            ]
            assert container.envs["NVIDIA_VISIBLE_DEVICES"] == f"{ids[1]},{ids[3]}"

            with pytest.raises(grpc.RpcError) as err:
                stub.Allocate(pb2.AllocateRequest(container_requests=[
                    pb2.ContainerAllocateRequest(devices_ids=["GPU-nope"])]))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        plugin.stop()
        runner.join(10)
        kubelet.stop()
    assert not runner.is_alive()
    assert not (plugin_dir / req.endpoint).exists()
