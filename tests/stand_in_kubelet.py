"""A stand-in for the kubelet's side of the device-plugin API: it serves Registration on
kubelet.sock in a folder and records what registers. The fake GPU plugin's unit test runs the
plugin in-process against it; the images tier runs the fake-gpu image's plugin in a chroot
against it (the real kubelet is in tests/cluster)."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path

import grpc


class StandInKubelet:
    """Serves Registration on kubelet.sock and records the requests."""

    def __init__(self, stubs, directory: Path):
        pb2, pb2_grpc = stubs
        self.requests = []
        self.registered = threading.Event()
        kubelet = self

        class Registration(pb2_grpc.RegistrationServicer):
            def Register(self, request, context):
                kubelet.requests.append(request)
                kubelet.registered.set()
                return pb2.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb2_grpc.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)
