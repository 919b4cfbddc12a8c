"""The fake-gpu image (images/fake-gpu): the local cluster's fake GPU device plugin packaged for
clusters whose nodes are not this machine (the e2e tier's kind provider runs it as a DaemonSet,
testbed/cluster_providers.py). Its entrypoint, run in a chroot of the image's layer exactly as
the image config says, registers with a stand-in kubelet and serves the devices it made."""

from __future__ import annotations

import os
import stat

import pytest

from testbed.local_cluster.fake_gpu.plugin import load_stubs
from tests.images.conftest import wait_for
from tests.stand_in_kubelet import StandInKubelet

pytestmark = pytest.mark.images
grpc = pytest.importorskip("grpc")


def test_the_image_s_plugin_registers_and_serves_its_fake_gpus(unpacked, root_processes, builder, tmp_path):
    root = unpacked("fake-gpu")
    spec = builder.IMAGES["fake-gpu"]
    plugin_dir = root / "var/lib/kubelet/device-plugins"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    stubs = load_stubs(tmp_path / "stubs")
    pb2, pb2_grpc = stubs
    kubelet = StandInKubelet(stubs, plugin_dir)
    env = dict(entry.split("=", 1) for entry in spec.env)
    process = root_processes(root, [*spec.entrypoint, "--node-name=image-test", "--count=3",
                                    "--device-dir=/var/lib/fake-gpu-dev",
                                    "--plugin-dir=/var/lib/kubelet/device-plugins"], env=env)
    try:
        assert kubelet.registered.wait(60), f"the image's plugin never registered: {process.proc.poll()}"
        request = kubelet.requests[0]
        assert request.resource_name == "nvidia.com/gpu"
        with grpc.insecure_channel(f"unix://{plugin_dir / request.endpoint}") as channel:
            stream = pb2_grpc.DevicePluginStub(channel).ListAndWatch(pb2.Empty())
            assert [device.ID for device in next(stream).devices] == [f"GPU-fake-image-test-{i}" for i in range(3)]
            stream.cancel()
        nodes = [root / f"var/lib/fake-gpu-dev/nvidia{i}" for i in range(3)]
        wait_for(lambda: all(node.exists() for node in nodes), timeout=10, what="the fake /dev/nvidiaN nodes")
        assert [(stat.S_ISCHR(node.lstat().st_mode), os.major(node.lstat().st_rdev), os.minor(node.lstat().st_rdev))
                for node in nodes] == [(True, 195, i) for i in range(3)]
    finally:
        kubelet.stop()
