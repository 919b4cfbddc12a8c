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

The gRPC stubs are generated from deviceplugin_v1beta1.proto (beside this file)
with grpcio-tools at first use, into a cache directory keyed by the proto's hash.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import logging
import os
import signal
import stat
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc

HERE = Path(__file__).resolve().parent
PROTO = HERE / "deviceplugin_v1beta1.proto"
API_VERSION = "v1beta1"
NVIDIA_MAJOR = 195

log = logging.getLogger("fake-gpu")


def load_stubs(cache: Path | None = None):
    """(pb2, pb2_grpc) for deviceplugin_v1beta1.proto, generated once per proto version."""
    digest = hashlib.sha256(PROTO.read_bytes()).hexdigest()[:16]
    cache = cache or Path(os.environ.get("KUBESLURM_CACHE", Path.home() / ".cache" / "kubeslurm"))
    out = cache / "cluster" / "deviceplugin-stubs" / digest
    if not (out / "deviceplugin_v1beta1_pb2_grpc.py").exists():
        from grpc_tools import protoc  # only needed the first time

        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(os.path.join(out.parent, f".{digest}.{os.getpid()}"))
        tmp.mkdir(exist_ok=True)
        rc = protoc.main(
            ["protoc", f"-I{HERE}", f"--python_out={tmp}", f"--grpc_python_out={tmp}", str(PROTO)]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed on {PROTO} (exit {rc})")
        for f in tmp.iterdir():
            f.replace(out / f.name)
        tmp.rmdir()
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return (
        importlib.import_module("deviceplugin_v1beta1_pb2"),
        importlib.import_module("deviceplugin_v1beta1_pb2_grpc"),
    )


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


class FakeGpuPlugin:
    def __init__(self, pb2, pb2_grpc, *, node_name: str, count: int, device_dir: Path,
                 plugin_dir: Path, resource: str = "nvidia.com/gpu"):
        self.pb2, self.pb2_grpc = pb2, pb2_grpc
        self.node_name = node_name
        self.resource = resource
        self.device_dir = device_dir
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / f"kubeslurm-fake-gpu-{resource.replace('/', '-')}.sock"
        self.kubelet_socket = plugin_dir / "kubelet.sock"
        # IDs look like the real plugin's GPU UUIDs and say what they are.
        self.ids = [f"GPU-fake-{node_name}-{i}" for i in range(count)]
        self.index = {dev_id: i for i, dev_id in enumerate(self.ids)}
        self._server: grpc.Server | None = None
        self._stop = threading.Event()
        self._generation = threading.Event()  # set when the current server is torn down

    # -- DevicePlugin service --------------------------------------------------

    def GetDevicePluginOptions(self, request, context):
        return self.pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        devices = [self.pb2.Device(ID=i, health="Healthy") for i in self.ids]
        log.info("ListAndWatch: advertising %d devices", len(devices))
        yield self.pb2.ListAndWatchResponse(devices=devices)
        # The devices never change; keep the stream open until the kubelet hangs
        # up or we stop (the kubelet treats a closed stream as the plugin gone).
        generation = self._generation
        while context.is_active() and not generation.wait(1.0):
            pass

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

    def PreStartContainer(self, request, context):
        return self.pb2.PreStartContainerResponse()

    # -- lifecycle ---------------------------------------------------------------

    def _serve(self) -> None:
        self.socket.unlink(missing_ok=True)
        self._generation = threading.Event()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.pb2_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def _teardown(self) -> None:
        self._generation.set()
        if self._server is not None:
            self._server.stop(grace=1).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def _register(self) -> None:
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            stub = self.pb2_grpc.RegistrationStub(channel)
            stub.Register(
                self.pb2.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.resource,
                    options=self.GetDevicePluginOptions(None, None),
                ),
                timeout=10,
            )
        log.info("registered %s (%d devices) with %s", self.resource, len(self.ids), self.kubelet_socket)

    def run(self) -> None:
        """Serves until stop(); re-registers whenever the kubelet restarts.

        A restarting kubelet wipes the plugin directory and opens a new
        kubelet.sock, so both sockets are watched.
        """
        kubelet_inode = None
        while not self._stop.is_set():
            try:
                inode = self.kubelet_socket.stat().st_ino
            except FileNotFoundError:
                inode = None
            alive = self._server is not None and self.socket.exists()
            if inode is not None and (inode != kubelet_inode or not alive):
                self._teardown()
                try:
                    self._serve()
                    self._register()
                    kubelet_inode = inode
                except Exception as exc:  # kubelet still starting: retry
                    log.warning("registering with the kubelet failed, retrying: %s", exc)
                    self._teardown()
                    kubelet_inode = None
            self._stop.wait(1.0)
        self._teardown()

    def stop(self, *_) -> None:
        self._stop.set()


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
