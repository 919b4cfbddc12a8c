"""The kubeslurm device plugin's answers (device_plugin/allocation.py) and the placement record
they read (render/bridge/placements.py)."""

import json

import pytest

from kubeslurm.device_plugin.allocation import AllocationRefused, candidates, check, preferred
from kubeslurm.render.bridge.placements import Placement, placement_data, read_placements

A = "0f8fad5b-d9cb-469f-a165-70867728950e"
B = "1f8fad5b-d9cb-469f-a165-70867728950e"
SERVER = Placement(A, "inference", "server-0", "node-a", "7", (1, 2))
OTHER_NODE = Placement(B, "inference", "server-1", "node-b", "8", (0, 1))
ALL = [f"gpu-{i}" for i in range(8)]


def test_the_record_round_trips_and_skips_what_does_not_parse():
    data = placement_data([OTHER_NODE, SERVER])
    assert list(data) == [A, B]
    assert json.loads(data[A]) == {"namespace": "inference", "name": "server-0", "node": "node-a", "job": "7", "gpus": [1, 2]}
    bad = {"not-a-uid": data[A], B.replace("1f", "2f"): "{", B.replace("1f", "3f"): '{"gpus": [-1]}'}
    assert read_placements({**data, **bad}) == [SERVER, OTHER_NODE]
    assert read_placements(None) == []


def test_candidates_are_this_nodes_placements_not_yet_admitted():
    assert candidates([SERVER, OTHER_NODE], "node-a", set()) == [SERVER]
    assert candidates([SERVER, OTHER_NODE], "node-a", {A}) == []


@pytest.mark.parametrize(
    "waiting,available,must_include,size,expected",
    [
        ([SERVER], ALL, [], 2, ["gpu-1", "gpu-2"]),
        ([SERVER], ["gpu-0", "gpu-1", "gpu-3"], [], 2, []),  # gpu-2 taken: no preference, Allocate refuses
        ([SERVER], ALL, [], 3, []),  # another size: not this pod
        ([SERVER], ALL, ["gpu-5"], 2, []),
        ([], ALL, [], 2, []),
        ([SERVER, Placement(B, "inference", "server-1", "node-a", "8", (4, 5))], ALL, [], 2, []),  # ambiguous
    ],
)
def test_the_preferred_devices_are_exactly_slurms(waiting, available, must_include, size, expected):
    assert preferred(waiting, available, must_include, size) == expected


def test_an_allocation_of_slurms_devices_is_accepted():
    assert check([SERVER], ["gpu-2", "gpu-1"]) == SERVER


@pytest.mark.parametrize(
    "waiting,requested,message",
    [
        ([], ["gpu-0"], "only to pods Slurm placed"),
        ([SERVER], ["gpu-0", "gpu-1"], "are not the GPUs Slurm allocated (inference/server-0: ['gpu-1', 'gpu-2'])"),
        ([SERVER, Placement(B, "inference", "server-1", "node-a", "8", (2, 1))], ["gpu-1", "gpu-2"], "match several"),
    ],
)
def test_any_other_allocation_is_refused_saying_why(waiting, requested, message):
    with pytest.raises(AllocationRefused) as refused:
        check(waiting, requested)
    assert message in str(refused.value)


def test_the_record_is_owned_by_its_cluster_and_not_labelled_for_the_cluster_s_prune():
    from kubeslurm.api import parse_object
    from kubeslurm.render.bridge.placements import placements_config_map

    from .manifests import contract_documents, set_path

    cluster = parse_object(set_path(contract_documents()[0], "metadata.uid", A))
    record = placements_config_map(cluster, placement_data([OTHER_NODE, SERVER]))
    assert record["metadata"]["name"] == f"{cluster.metadata.name}-bridge-placements"
    assert record["metadata"]["namespace"] == cluster.metadata.namespace
    assert [o["uid"] for o in record["metadata"]["ownerReferences"]] == [A]
    assert "labels" not in record["metadata"]  # the reconcile prunes labelled ConfigMaps it did not render
    assert read_placements(record["data"]) == [SERVER, OTHER_NODE]
