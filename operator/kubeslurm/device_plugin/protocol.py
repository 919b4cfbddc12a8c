"""The kubelet's device-plugin API (v1beta1, gRPC over unix sockets): the generated stubs and
the life of a plugin beside a kubelet (serve, register, re-register after a kubelet restart).

Shared by the kubeslurm device plugin (server.py, `kubeslurm.io/gpu`) and the local cluster's
fake GPU plugin (testbed/local_cluster/fake_gpu), so both speak the one copy of the protocol.
The stubs are generated from deviceplugin_v1beta1.proto (beside this file) with grpcio-tools at
first use, into a cache directory keyed by the proto's hash; images generate them at build time
so that grpcio-tools need not ship.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import sys
import threading
from concurrent import futures
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "deviceplugin_v1beta1.proto"
API_VERSION = "v1beta1"
KUBELET_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")

log = logging.getLogger("kubeslurm.device_plugin")


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


class DevicePluginLifecycle:
    """Serves a DevicePlugin servicer (the subclass) on its socket in the kubelet's plugin folder
    and registers it; run() keeps it registered until stop().

    A restarting kubelet wipes the plugin folder and opens a new kubelet.sock, so both sockets
    are watched: a new kubelet.sock (another inode) or our socket gone means serve and
    register again. ListAndWatch streams end when the generation they started in is torn down.
    """

    def __init__(self, pb2, pb2_grpc, *, resource: str, plugin_dir: Path, socket_name: str):
        self.pb2, self.pb2_grpc = pb2, pb2_grpc
        self.resource = resource
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / socket_name
        self.kubelet_socket = plugin_dir / "kubelet.sock"
        self._server = None
        self._stop = threading.Event()
        self._generation = threading.Event()  # set when the current server is torn down

    def GetDevicePluginOptions(self, request, context):
        return self.pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def PreStartContainer(self, request, context):
        return self.pb2.PreStartContainerResponse()

    def keep_stream_open(self, context) -> None:
        """Blocks a ListAndWatch stream until the kubelet hangs up or this server generation
        ends (the kubelet treats a closed stream as the plugin gone)."""
        generation = self._generation
        while context.is_active() and not generation.wait(1.0):
            pass

    def _serve(self) -> None:
        import grpc

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
        import grpc

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
        log.info("registered %s with %s", self.resource, self.kubelet_socket)

    def run(self) -> None:
        """Serves until stop(); re-registers whenever the kubelet restarts."""
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
