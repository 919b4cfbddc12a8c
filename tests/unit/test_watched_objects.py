"""benchmarks/watched_objects.py against a stand-in for `kubectl get --watch --output-watch-events -o json`:
a script printing events as kubectl does (a line of JSON each), as told through a FIFO."""

import json
import os
import sys
import textwrap
import threading
import time

import pytest

from benchmarks.scale_bench import node_sets_at, statefulsets_at
from benchmarks.watched_objects import WatchedObjects

# Prints each line of the FIFO it is given (a JSON event, or "exit") as kubectl prints a watch
# event; "exit" ends it, as the API server ending a watch ends kubectl. Started again after
# that, it reads the FIFO on.
STAND_IN = textwrap.dedent("""
    import json, sys
    with open(sys.argv[1]) as commands:
        for line in commands:
            if line.strip() == "exit":
                sys.exit(0)
            print(json.dumps(json.loads(line)), flush=True)
""")


@pytest.fixture
def stand_in(tmp_path):
    script = tmp_path / "kubectl.py"
    script.write_text(STAND_IN)
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    # The FIFO held open for writing by us, so each stand-in's reading never sees its end.
    writer = open(os.open(fifo, os.O_RDWR), "w")
    watched = WatchedObjects([sys.executable, str(script), str(fifo)])

    def send(event_type: str, name: str, **status):
        writer.write(json.dumps({"type": event_type, "object": {"metadata": {"name": name}, "status": status}}) + "\n")
        writer.flush()

    yield watched, send, writer
    writer.write("exit\n")
    writer.flush()
    watched.close()
    writer.close()


def test_the_end_is_the_arrival_of_the_change_that_completed_the_condition(stand_in):
    watched, send, _ = stand_in
    held = []
    waiter = threading.Thread(target=lambda: held.append(watched.first_held(
        lambda objects: objects.get("a", {}).get("status", {}).get("replicas") == 0, timeout=30)))
    waiter.start()
    send("ADDED", "a", replicas=3)
    time.sleep(0.3)
    before = time.monotonic()
    send("MODIFIED", "a", replicas=0)
    time.sleep(0.5)
    send("MODIFIED", "a", replicas=0)  # a later change that keeps it: not the end
    waiter.join(timeout=30)
    assert held and before <= held[0] < before + 0.4


def test_a_condition_already_true_holds_at_once_and_a_deleted_object_is_forgotten(stand_in):
    watched, send, _ = stand_in
    send("ADDED", "a", replicas=1)
    watched.first_held(lambda objects: "a" in objects, timeout=30)
    start = time.monotonic()
    assert watched.first_held(lambda objects: "a" in objects, timeout=30) >= start
    send("DELETED", "a", replicas=1)
    watched.first_held(lambda objects: "a" not in objects, timeout=30)


def test_a_condition_that_never_holds_times_out(stand_in):
    watched, _, _ = stand_in
    with pytest.raises(TimeoutError, match="did not hold in 1 s"):
        watched.first_held(lambda objects: "never" in objects, timeout=1)


def test_output_it_cannot_read_is_said_to_the_waiter_at_once(stand_in):
    watched, _, writer = stand_in
    writer.write('"not an event"\n')
    writer.flush()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="stopped: TypeError"):
        watched.first_held(lambda objects: "a" in objects, timeout=30)
    assert time.monotonic() - start < 10


def test_an_ended_watch_starts_again(stand_in):
    watched, send, writer = stand_in
    send("ADDED", "a", replicas=1)
    watched.first_held(lambda objects: "a" in objects, timeout=30)
    writer.write("exit\n")
    writer.flush()
    send("ADDED", "b", replicas=1)  # read by the next stand-in, after the first exited
    watched.first_held(lambda objects: "b" in objects, timeout=30)


def node_set(name, replicas, ready=None, generation=2, observed=2, condition="True"):
    return {"metadata": {"name": name, "generation": generation},
            "spec": {"replicas": replicas},
            "status": {"replicas": replicas if ready is None else ready, "readyReplicas": replicas if ready is None else ready,
                       "observedGeneration": observed, "conditions": [{"type": "Ready", "status": condition}]}}


@pytest.mark.parametrize("objects, expected", [
    ({"n0": node_set("n0", 0), "n1": node_set("n1", 0)}, True),
    ({"n0": node_set("n0", 0)}, False),  # n1 not seen yet
    ({"n0": node_set("n0", 0), "n1": node_set("n1", 0, observed=1)}, False),  # a status of the spec before
    ({"n0": node_set("n0", 0), "n1": node_set("n1", 0, condition="False")}, False),
    ({"n0": node_set("n0", 0), "n1": node_set("n1", 0, ready=3)}, False),  # pods still there
    ({"n0": node_set("n0", 1000), "n1": node_set("n1", 0)}, False),
])
def test_node_sets_at(objects, expected):
    assert node_sets_at(objects, {"n0": 0, "n1": 0}) is expected


@pytest.mark.parametrize("objects, expected", [
    ({"a": {"status": {"replicas": 0}}}, True),
    ({"a": {"status": {}}}, True),  # status fields at 0 are left out
    ({"a": {"status": {"replicas": 2, "readyReplicas": 0}}}, False),  # terminating pods still there
    ({}, False),  # not seen yet
])
def test_statefulsets_at_zero(objects, expected):
    assert statefulsets_at(objects, {"a": 0}) is expected


def test_statefulsets_at_n_wants_every_pod_ready():
    assert not statefulsets_at({"a": {"status": {"replicas": 5, "readyReplicas": 4}}}, {"a": 5})
    assert statefulsets_at({"a": {"status": {"replicas": 5, "readyReplicas": 5}}}, {"a": 5})
