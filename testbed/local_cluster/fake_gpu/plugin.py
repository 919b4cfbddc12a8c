"""A FAKE NVIDIA GPU device plugin for machines without GPUs.

It speaks the real kubelet device-plugin API (v1beta1, gRPC over unix
sockets): registers `nvidia.com/gpu` with the kubelet, advertises N devices and,
when the kubelet allocates some of them to a container, hands back DeviceSpecs
so the container sees its k GPUs as /dev/nvidia0..k-1, each backed by a
distinct host character device (major 195, minor = the fake GPU's index, made
with mknod under --device-dir). NVIDIA_VISIBLE_DEVICES lists the allocated
device IDs, as the real plugin does with GPU UUIDs. Nothing else is faked: the
kubelet's device manager, the scheduler's accounting, the checkpoint across
kubelet restarts and runc's device cgroup rules are the real ones.

    python -m testbed.local_cluster.fake_gpu --node-name kubeslurm-1 --count 8 \\
        --device-dir /var/lib/kubeslurm-cluster/nodes/kubeslurm-1/dev

The protocol (stubs, serving, registration) is kubeslurm's own
(operator/kubeslurm/device_plugin/protocol.py), shared with the kubeslurm device plugin.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
from pathlib import Path

import grpc

from kubeslurm.device_plugin.protocol import DevicePluginLifecycle, load_stubs

__all__ = ["FakeGpuPlugin", "load_stubs", "make_device_nodes", "main"]

NVIDIA_MAJOR = 195

log = logging.getLogger("fake-gpu")


def make_device_nodes(device_dir: Path, count: int) -> list[Path]:
    """device_dir/nvidiaN as character devices 195:N (what the NVIDIA driver creates)."""
    device_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = device_dir / f"nvidia{i}"
        want = os.makedev(NVIDIA_MAJOR, i)
        try:
            st = path.lstat()
            if not stat.S_ISCHR(st.st_mode) or st.st_rdev != want:
                path.unlink()
                raise FileNotFoundError
        except FileNotFoundError:
            os.mknod(path, 0o666 | stat.S_IFCHR, want)
        os.chmod(path, 0o666)  # mknod's mode goes through the umask; runc copies it
        paths.append(path)
    return paths


class FakeGpuPlugin(DevicePluginLifecycle):
    def __init__(self, pb2, pb2_grpc, *, node_name: str, count: int, device_dir: Path,
                 plugin_dir: Path, resource: str = "nvidia.com/gpu"):
        super().__init__(pb2, pb2_grpc, resource=resource, plugin_dir=plugin_dir,
                         socket_name=f"kubeslurm-fake-gpu-{resource.replace('/', '-')}.sock")
        self.node_name = node_name
        self.device_dir = device_dir
        # IDs look like the real plugin's GPU UUIDs and say what they are.
        self.ids = [f"GPU-fake-{node_name}-{i}" for i in range(count)]
        self.index = {dev_id: i for i, dev_id in enumerate(self.ids)}

    # -- DevicePlugin service --------------------------------------------------

    def ListAndWatch(self, request, context):
        devices = [self.pb2.Device(ID=i, health="Healthy") for i in self.ids]
        log.info("ListAndWatch: advertising %d devices", len(devices))
        yield self.pb2.ListAndWatchResponse(devices=devices)
        # The devices never change.
        self.keep_stream_open(context)

    def GetPreferredAllocation(self, request, context):
        responses = []
        for req in request.container_requests:
            chosen = list(req.must_include_deviceIDs)
            for dev_id in sorted(req.available_deviceIDs, key=lambda d: self.index.get(d, 1 << 30)):
                if len(chosen) >= req.allocation_size:
                    break
                if dev_id not in chosen:
                    chosen.append(dev_id)
            responses.append(self.pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return self.pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        responses = []
        for req in request.container_requests:
            unknown = [d for d in req.devices_ids if d not in self.index]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown devices {unknown}")
            ids = sorted(req.devices_ids, key=self.index.__getitem__)
            specs = [
                self.pb2.DeviceSpec(
                    container_path=f"/dev/nvidia{k}",
                    host_path=str(self.device_dir / f"nvidia{self.index[dev_id]}"),
                    permissions="rw",
                )
                for k, dev_id in enumerate(ids)
            ]
            envs = {
                "NVIDIA_VISIBLE_DEVICES": ",".join(ids),
                "KUBESLURM_FAKE_GPU": "1",
            }
            log.info("Allocate %s -> %s", ids, [s.host_path for s in specs])
            responses.append(self.pb2.ContainerAllocateResponse(envs=envs, devices=specs))
        return self.pb2.AllocateResponse(container_responses=responses)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node-name", required=True, help="used in the device IDs")
    parser.add_argument("--count", type=int, default=8, help="number of fake GPUs (default 8)")
    parser.add_argument("--device-dir", type=Path, required=True, help="where the fake /dev/nvidiaN nodes are made")
    parser.add_argument("--plugin-dir", type=Path, default=Path("/var/lib/kubelet/device-plugins"),
                        help="the kubelet's device-plugins directory")
    parser.add_argument("--resource", default="nvidia.com/gpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fake-gpu %(levelname)s %(message)s")
    pb2, pb2_grpc = load_stubs()
    make_device_nodes(args.device_dir, args.count)
    plugin = FakeGpuPlugin(pb2, pb2_grpc, node_name=args.node_name, count=args.count,
                           device_dir=args.device_dir, plugin_dir=args.plugin_dir, resource=args.resource)
    signal.signal(signal.SIGTERM, plugin.stop)
    signal.signal(signal.SIGINT, plugin.stop)
    plugin.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
