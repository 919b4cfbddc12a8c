"""The operator image runs the kubeslurm device plugin (`kubeslurm device-plugin`, what spec.bridge's
DaemonSet runs): in a chroot of the image's layer, as root as the DaemonSet runs it, with the
image's own environment, it registers kubeslurm.io/gpu with a stand-in kubelet, advertises the
GPUs of its device folder, and refuses every allocation while it cannot read the placement
record (here: no API server answers). So the image carries grpcio and the generated stubs
(grpcio-tools is gone from it, so nothing can be generated at run time)."""

from __future__ import annotations

import pytest

from kubeslurm.device_plugin.protocol import load_stubs
from testbed.local_cluster.fake_gpu.plugin import make_device_nodes
from tests.stand_in_kubelet import StandInKubelet

pytestmark = pytest.mark.images
grpc = pytest.importorskip("grpc")

# Nothing listens on port 1: reading the record fails at once.
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: nothing}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def test_the_operator_image_serves_kubeslurm_gpus_and_refuses_without_the_record(unpacked, root_processes, builder, tmp_path):
    root = unpacked("operator")
    spec = builder.IMAGES["operator"]
    plugin_dir = root / "var/lib/kubelet/device-plugins"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    make_device_nodes(root / "var/lib/test-dev", 3)
    (root / "tmp/kubeconfig").write_text(KUBECONFIG)
    stubs = load_stubs(tmp_path / "stubs")
    pb2, pb2_grpc = stubs
    kubelet = StandInKubelet(stubs, plugin_dir)
    env = {**dict(entry.split("=", 1) for entry in spec.env), "KUBECONFIG": "/tmp/kubeconfig"}
    process = root_processes(root, [*spec.entrypoint, "device-plugin", "--cluster=research", "--namespace=hpc",
                                    "--node=image-test", "--device-dir=/var/lib/test-dev",
                                    "--plugin-dir=/var/lib/kubelet/device-plugins"], env=env)
    try:
        assert kubelet.registered.wait(60), f"the image's device plugin never registered: {process.proc.poll()}"
        request = kubelet.requests[0]
        assert request.resource_name == "kubeslurm.io/gpu"
        with grpc.insecure_channel(f"unix://{plugin_dir / request.endpoint}") as channel:
            stub = pb2_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(pb2.Empty())
            assert [device.ID for device in next(stream).devices] == ["gpu-0", "gpu-1", "gpu-2"]
            stream.cancel()
            with pytest.raises(grpc.RpcError) as refused:
                stub.Allocate(pb2.AllocateRequest(container_requests=[
                    pb2.ContainerAllocateRequest(devices_ids=["gpu-0"])]))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "placement record cannot be read" in refused.value.details()
    finally:
        kubelet.stop()
    assert not list(root.glob("opt/kubeslurm/lib/python3*/site-packages/grpc_tools"))
