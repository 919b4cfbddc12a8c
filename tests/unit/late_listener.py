"""A TCP port on 127.0.0.1 that starts listening only after a delay: a daemon that comes up late."""

import socket
import threading
import time
from contextlib import contextmanager


@contextmanager
def listening_after(seconds: float):
    """Yields (port, opened): opened gets the monotonic time the port began to listen.
    Connections before then are refused (the socket is bound, not listening)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        opened: list[float] = []

        def listen_later():
            time.sleep(seconds)
            opened.append(time.monotonic())
            listener.listen(8)
        later = threading.Thread(target=listen_later)
        later.start()
        try:
            yield listener.getsockname()[1], opened
        finally:
            later.join()
