"""Node names become one compressed hostlist, so one scontrol acts on 1000 nodes: compress()
gives what Slurm reads back as exactly those names (the real-Slurm tier and the kwok
benchmark run it against slurmctld)."""

import pytest

from kubeslurm.reconcile.slurm_hostlist import compress, expand
from kubeslurm.reconcile.slurm_sync import _by_reason


@pytest.mark.parametrize(
    "hosts, hostlist",
    [
        (["cpu-0"], "cpu-0"),
        ([f"cpu-{i}" for i in range(1000)], "cpu-[0-999]"),
        (["cpu-5", "cpu-0", "cpu-2", "cpu-1", "h100-0"], "cpu-[0-2,5],h100-0"),
        (["n1", "n3", "n2", "n10"], "n[1-3,10]"),
        (["login", "cpu-0"], "login,cpu-0"),
        (["n08", "n09"], "n0[8-9]"),  # zero-padded numbers keep their digits
        (["cpu-0", "cpu-0"], "cpu-0"),
    ],
)
def test_compress_gives_the_hostlist_that_expands_to_the_same_names(hosts, hostlist):
    assert compress(hosts) == hostlist
    assert sorted(expand(hostlist)) == sorted(set(hosts))


def test_many_nodes_with_one_reason_are_one_command():
    reasons = {f"cpu-{i}": "kubernetes node k1 is not Ready" for i in range(500)}
    reasons["h100-0"] = "kubernetes node k2 is cordoned"
    grouped = _by_reason(reasons)
    assert {why: compress(nodes) for why, nodes in grouped.items()} == {
        "kubernetes node k1 is not Ready": "cpu-[0-499]", "kubernetes node k2 is cordoned": "h100-0"}
