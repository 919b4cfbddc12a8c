"""Objects of one kind as `kubectl get --watch` streams them, and the moment a condition on them first held.

The scale benchmark used to poll for the end of a scale (`kubectl get` every 0.5 s): the poll found
the end up to 0.6 s after it came (a kubectl run takes 0.1-0.2 s on the busy cores, then the
interval), at random, on either side of a ratio, and its own kubectl runs took CPU from the scale
it timed. A watch hears each change as the API server sends it, so the end is the moment the
change that completed the condition arrived, a few milliseconds after its write.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

Objects = dict[str, dict]  # name -> object


def watch_command(kubectl: list[str], kind: str, namespace: str) -> list[str]:
    """`kubectl` (binary and --kubeconfig) watching `kind` in `namespace`, every change a JSON event."""
    return [*kubectl, "get", kind, "-n", namespace, "--watch", "--output-watch-events", "-o", "json"]


class WatchedObjects:
    """name -> the object as last seen, kept by a watch_command() in the background."""

    def __init__(self, command: list[str]):
        self._command = command
        self._changed = threading.Condition()
        self._objects: Objects = {}
        # What first_held waits for, looked at after each change as it arrives (not when the waiter
        # wakes: several changes may arrive meanwhile), and when it first held.
        self._condition: Callable[[Objects], bool] | None = None
        self._held_at: float | None = None
        self._closing = threading.Event()
        self._broken: str | None = None  # why the watching stopped for good (output it cannot read)
        self._process: subprocess.Popen | None = None
        self._reader = threading.Thread(target=self._watch, name="watched-objects", daemon=True)
        self._reader.start()

    def _watch(self) -> None:
        try:
            self._watch_again_and_again()
        except Exception as error:  # noqa: BLE001 - said to the waiter instead of waiting out its timeout
            with self._changed:
                self._broken = f"{type(error).__name__}: {error}"
                self._changed.notify_all()
            if self._process is not None:
                self._process.kill()

    def _watch_again_and_again(self) -> None:
        """One kubectl after another: the API server ends a watch after 30-60 minutes, and the
        next one's listing replaces what the last one saw."""
        while True:
            with tempfile.TemporaryFile("w+") as errors:
                with self._changed:  # close() either sees this kubectl or stops the next
                    if self._closing.is_set():
                        return
                    self._process = subprocess.Popen(self._command, stdout=subprocess.PIPE, stderr=errors, text=True)
                self._read(self._process.stdout)
                code = self._process.wait()
                if not self._closing.is_set() and code != 0:
                    errors.seek(0)
                    print(f"watched objects: {self._command} exited {code}: {errors.read()[-500:]}",
                          file=sys.stderr, flush=True)
                    self._closing.wait(1)
            with self._changed:
                self._objects = {}

    def _read(self, stream) -> None:
        # With --output-watch-events kubectl prints each event as one line of JSON.
        for line in stream:
            if line.strip():
                self._apply(json.loads(line), time.monotonic())

    def _apply(self, event: dict, arrived: float) -> None:
        obj = event["object"]
        name = obj["metadata"]["name"]
        with self._changed:
            if event["type"] == "DELETED":
                self._objects.pop(name, None)
            else:
                self._objects[name] = obj
            if self._condition is not None and self._held_at is None and self._condition(self._objects):
                self._held_at = arrived
                self._changed.notify_all()

    def first_held(self, condition: Callable[[Objects], bool], timeout: float) -> float:
        """Waits until `condition(objects)` holds; the time.monotonic() at which the change that
        made it hold arrived (now, if it holds already). Raises TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._condition, self._held_at = condition, (time.monotonic() if condition(self._objects) else None)
            try:
                while self._held_at is None:
                    if self._broken:
                        raise RuntimeError(f"watching {' '.join(self._command[-8:])} stopped: {self._broken}")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"the condition did not hold in {timeout:.0f} s")
                    self._changed.wait(left)
                return self._held_at
            finally:
                self._condition = None

    def close(self) -> None:
        with self._changed:
            self._closing.set()
            if self._process is not None:
                self._process.terminate()
        self._reader.join(timeout=10)
