"""gres.conf, cgroup.conf, topology.conf, slurmdbd.conf, the slurmd registration line and sacctmgr commands."""

import pytest

from kubeslurm.api import load_documents, parse_object
from kubeslurm.render.config.accounting_commands import accounting_commands
from kubeslurm.render.config.cgroup_conf import render_cgroup_conf
from kubeslurm.render.config.gres_conf import gres_lines
from kubeslurm.render.config.slurmdbd_conf import render_slurmdbd_conf
from kubeslurm.render.config.topology_conf import block_lines, render_topology_conf, tree_lines
from kubeslurm.render.slurmd.node import slurmd_conf_line

from .manifests import contract_documents, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()


@pytest.mark.parametrize(
    "gpus,max_replicas,expected",
    [
        (None, 4, []),
        ({"count": 0}, 4, []),
        ({"count": 1}, 1, ["NodeName=h100-[0-0] AutoDetect=off Name=gpu File=/dev/nvidia0"]),
        ({"count": 8, "type": "h100"}, 16, ["NodeName=h100-[0-15] AutoDetect=off Name=gpu Type=h100 File=/dev/nvidia[0-7]"]),
        ({"count": 8, "autoDetect": "nvml"}, 2, ["NodeName=h100-[0-1] AutoDetect=nvml"]),
    ],
)
def test_gres_lines(gpus, max_replicas, expected):
    doc = set_path(set_path(GPU_NODES, "spec.gpus", gpus), "spec.maxReplicas", max_replicas)
    doc = set_path(doc, "spec.replicas", min(2, max_replicas))
    assert gres_lines(parse_object(doc)) == expected


@pytest.mark.parametrize(
    "doc,expected",
    [
        (GPU_NODES, "CPUs=8 RealMemory=31129 Features=h100,nvlink Gres=gpu:h100:8"),
        (CPU_NODES, "CPUs=4 RealMemory=7782 Features=cpu"),
        (set_path(GPU_NODES, "spec.gpus", {"count": 2}), "CPUs=8 RealMemory=31129 Features=h100,nvlink Gres=gpu:2"),
    ],
)
def test_slurmd_registers_the_pods_share(doc, expected):
    assert slurmd_conf_line(parse_object(doc)) == expected


def test_cgroup_conf_follows_constrain_with_cgroups():
    assert "CgroupPlugin=disabled" in render_cgroup_conf(parse_object(CLUSTER))
    constrained = render_cgroup_conf(parse_object(set_path(CLUSTER, "spec.slurm.constrainWithCgroups", True)))
    assert "ConstrainDevices=yes" in constrained and "CgroupPlugin=autodetect" in constrained


PLACEMENTS = {
    "h100-0": {"zone": "a", "switch": "sw1"},
    "h100-1": {"zone": "a", "switch": "sw1"},
    "h100-2": {"zone": "a", "switch": "sw2"},
    "h100-3": {"zone": "b", "switch": "sw3"},
    "cpu-0": {},
}


def test_tree_topology_builds_switch_levels_and_a_root():
    assert tree_lines(["zone", "switch"], PLACEMENTS) == [
        "SwitchName=s-a-sw1 Nodes=h100-0,h100-1",
        "SwitchName=s-a-sw2 Nodes=h100-2",
        "SwitchName=s-b-sw3 Nodes=h100-3",
        "SwitchName=s-unlabelled-unlabelled Nodes=cpu-0",
        "SwitchName=s-a Switches=s-a-sw1,s-a-sw2",
        "SwitchName=s-b Switches=s-b-sw3",
        "SwitchName=s-unlabelled Switches=s-unlabelled-unlabelled",
        "SwitchName=s-root Switches=s-a,s-b,s-unlabelled",
    ]


def test_single_switch_needs_no_root_and_no_nodes_means_no_switches():
    assert tree_lines(["zone"], {"n-0": {"zone": "a"}}) == ["SwitchName=s-a Nodes=n-0"]
    assert tree_lines(["zone"], {}) == []


def test_block_topology():
    assert block_lines("switch", PLACEMENTS, [2, 4]) == [
        "BlockName=b-sw1 Nodes=h100-0,h100-1",
        "BlockName=b-sw2 Nodes=h100-2",
        "BlockName=b-sw3 Nodes=h100-3",
        "BlockName=b-unlabelled Nodes=cpu-0",
        "BlockSizes=2,4",
    ]


def test_label_values_become_safe_switch_names():
    assert tree_lines(["k"], {"n-0": {"k": "rack 7/a"}}) == ["SwitchName=s-rack_7_a Nodes=n-0"]


def test_no_topology_no_file():
    assert render_topology_conf(parse_object(CLUSTER), PLACEMENTS) is None


def test_slurmdbd_conf_internal_and_external():
    internal = render_slurmdbd_conf(parse_object(CLUSTER), "s3cret")
    assert "StorageHost=research-database" in internal and "StoragePass=s3cret" in internal
    assert "AuthType=auth/slurm" in internal and "DbdHost=localhost" in internal
    external = parse_object(set_path(CLUSTER, "spec.accounting.database", {
        "external": {"host": "db.example", "port": 3307, "user": "acct", "database": "acct_db", "passwordSecretRef": {"name": "db"}}}))
    text = render_slurmdbd_conf(external, "pw")
    assert all(s in text for s in ["StorageHost=db.example", "StoragePort=3307", "StorageUser=acct", "StorageLoc=acct_db"])
    with pytest.raises(ValueError, match="one line"):
        render_slurmdbd_conf(external, "a#b")


def test_sacctmgr_commands_create_accounts_shares_users_and_limits():
    commands = accounting_commands(load_documents([CLUSTER]).clusters[0])
    assert commands[0] == ["add", "cluster", "research"]
    assert ["add", "account", "vision", "Cluster=research", "Fairshare=60"] in commands
    assert ["add", "user", "alice", "Account=vision", "Cluster=research"] in commands
    assert ["add", "user", "bob", "Account=nlp", "Cluster=research"] in commands
    nlp_limits = next(c for c in commands if c[:4] == ["modify", "account", "where", "name=nlp"])
    assert "GrpTRES=gres/gpu=16,cpu=-1,node=-1" in nlp_limits and "Fairshare=40" in nlp_limits


def test_max_job_time_is_maxwall_and_cleared_when_unset():
    limited = set_path(CLUSTER, "spec.accounts.1.limits", {"maxGPUs": 16, "maxJobTime": "2:00:00"})
    commands = accounting_commands(load_documents([limited]).clusters[0])
    nlp, vision = (next(c for c in commands if c[:4] == ["modify", "account", "where", f"name={n}"]) for n in ("nlp", "vision"))
    assert "MaxWall=2:00:00" in nlp
    assert "MaxWall=-1" in vision  # no limit in the spec: none in Slurm, even if one was set before
