import re

import pytest

from kubeslurm.api import ManifestError, load_documents
from kubeslurm.render.errors import RenderError
from kubeslurm.render.config.slurm_conf import (
    ACCOUNTING_TUNABLES, BACKUP_TUNABLES, DEFAULT_TUNABLES, FAIR_SHARE_TUNABLES, OWNED_KEYS, render_slurm_conf,
)

from .manifests import contract_documents, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()


def render(cluster_doc=CLUSTER, node_set_docs=(GPU_NODES, CPU_NODES)) -> str:
    manifests = load_documents([cluster_doc, *node_set_docs])
    return render_slurm_conf(manifests.clusters[0], manifests.node_sets)


def settings(conf: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in conf.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_every_key_is_owned_or_a_documented_default():
    known = (set(OWNED_KEYS) | set(DEFAULT_TUNABLES) | set(FAIR_SHARE_TUNABLES) | set(ACCOUNTING_TUNABLES)
             | set(BACKUP_TUNABLES) | {"PreemptMode"})
    assert set(settings(render())) <= known
    assert set(settings(render(set_path(CLUSTER, "spec.controller.backup", True)))) <= known


@pytest.mark.parametrize(
    "path,value,expected",
    [
        ("spec.scheduling.backfill", True, {"SchedulerType": ["sched/backfill"]}),
        ("spec.scheduling.backfill", False, {"SchedulerType": ["sched/builtin"]}),
        ("spec.scheduling.fairShare", {"enabled": True, "decayHalfLife": "14-0"},
         {"PriorityType": ["priority/multifactor"], "PriorityDecayHalfLife": ["14-0"], "PriorityWeightFairshare": ["10000"]}),
        ("spec.scheduling.fairShare", {"enabled": False}, {"PriorityType": ["priority/basic"]}),
        ("spec.scheduling.preemption", "off", {"PreemptType": ["preempt/none"], "PreemptMode": ["OFF"]}),
        ("spec.scheduling.preemption", "qos", {"PreemptType": ["preempt/qos"], "PreemptMode": ["REQUEUE"]}),
        ("spec.scheduling.preemption", "partition", {"PreemptType": ["preempt/partition_prio"], "PreemptMode": ["REQUEUE"]}),
        ("spec.controller.backup", True, {"SlurmctldHost": [
            "research-controller-0(research-slurmctld-0)",
            "research-controller-1(research-slurmctld-1)"]}),
        ("spec.slurm.constrainWithCgroups", True, {"ProctrackType": ["proctrack/cgroup"], "TaskPlugin": ["task/cgroup,task/affinity"]}),
        ("spec.slurm.constrainWithCgroups", False, {"ProctrackType": ["proctrack/linuxproc"], "TaskPlugin": ["task/none"]}),
        ("spec.slurmConf", {"MaxJobCount": "20000"}, {"MaxJobCount": ["20000"]}),
        ("spec.slurmConf", {"slurmctlddebug": "debug2"}, {"slurmctlddebug": ["debug2"]}),
        ("spec.topology", {"plugin": "block", "nodeLabels": ["nvlink-domain"]}, {"TopologyPlugin": ["topology/block"]}),
    ],
)
def test_spec_fields_become_slurm_settings(path, value, expected):
    got = settings(render(set_path(CLUSTER, path, value)))
    for key, values in expected.items():
        assert got.get(key) == values, f"{key}: {got.get(key)}"


@pytest.mark.parametrize(
    "backup,slurm_conf,expected",
    [
        # One slurmctld: nothing waits for it to fail over, so Slurm's own default stays.
        (False, {}, None),
        # A backup takes over after 30 s without the primary, not after Slurm's 120 s.
        (True, {}, ["30"]),
        # A site that wants another takeover delay says so; it replaces ours, once.
        (True, {"SlurmctldTimeout": "90"}, ["90"]),
        (True, {"slurmctldtimeout": "90"}, None),
        (False, {"SlurmctldTimeout": "90"}, ["90"]),
    ],
)
def test_slurmctld_timeout_follows_the_backup(backup, slurm_conf, expected):
    cluster = set_path(set_path(CLUSTER, "spec.controller.backup", backup), "spec.slurmConf", slurm_conf)
    got = settings(render(cluster))
    assert got.get("SlurmctldTimeout") == expected
    overrides = {key: [value] for key, value in slurm_conf.items()}
    assert {key: got[key] for key in overrides} == overrides


def test_a_backup_is_a_second_slurmctld_host_after_the_primary():
    hosts = settings(render(set_path(CLUSTER, "spec.controller.backup", True)))["SlurmctldHost"]
    # Order matters to Slurm: the first is the primary, which takes control back whenever it starts.
    assert hosts == ["research-controller-0(research-slurmctld-0)", "research-controller-1(research-slurmctld-1)"]


def test_a_user_override_replaces_the_default_instead_of_repeating_it():
    got = settings(render(set_path(CLUSTER, "spec.slurmConf", {"slurmctlddebug": "debug2"})))
    assert "SlurmctldDebug" not in got


def test_accounting_off_leaves_no_accounting_lines():
    cluster = set_path(set_path(CLUSTER, "spec.accounting", {"enabled": False}), "spec.accounts", [])
    got = settings(render(cluster))
    assert not any(key.startswith("AccountingStorage") for key in got)
    assert got["PriorityType"] == ["priority/basic"]  # fair-share needs slurmdbd's usage records


def test_accounting_on_points_at_the_slurmdbd_service():
    got = settings(render())
    assert got["AccountingStorageType"] == ["accounting_storage/slurmdbd"]
    assert got["AccountingStorageHost"] == ["research-slurmdbd"]
    assert got["AccountingStorageTRES"] == ["gres/gpu,gres/gpu:h100"]


def test_node_sets_and_partitions():
    got = settings(render())
    assert got["NodeSet"] == ["cpu Feature=cpu", "h100 Feature=h100"]
    gpu, cpu = got["PartitionName"]
    assert gpu.startswith("gpu Nodes=h100 Default=YES MaxTime=1-00:00:00 ")
    assert cpu.startswith("cpu Nodes=cpu Default=NO MaxTime=UNLIMITED ")
    # 32Gi less 5% over 8 CPUs; without it a job with no --mem takes the whole node
    assert "DefMemPerCPU=3891" in gpu
    assert got["MaxNodeCount"] == ["128"]
    assert got["SlurmctldParameters"] == ["enable_configless"]
    assert got["AuthType"] == ["auth/slurm"]


@pytest.mark.parametrize("key", ["SlurmctldHost", "authtype", "NodeName", "PartitionName", "SchedulerType", "MaxNodeCount"])
def test_owned_keys_are_refused_with_what_to_change_instead(key):
    with pytest.raises(RenderError) as error:
        render(set_path(CLUSTER, "spec.slurmConf", {key: "x"}))
    assert f"spec.slurmConf.{key}" in str(error.value)
    assert "instead" in str(error.value)


# Refused by the model now (so also by the CRD at kubectl apply), before any renderer runs.
@pytest.mark.parametrize("key,value,field,message", [
    ("Max Job", "1", "spec.slurmConf['Max Job']: ", "letters and digits"),  # a key with a space is quoted in the path
    ("MaxJobCount", "1\nNodeName=x", "spec.slurmConf.MaxJobCount: ", "one word"),
])
def test_malformed_extra_keys_are_refused(key, value, field, message):
    with pytest.raises(ManifestError, match=message) as error:
        render(set_path(CLUSTER, "spec.slurmConf", {key: value}))
    assert field in str(error.value)


def test_partition_naming_a_missing_node_set_says_which_and_what_exists():
    with pytest.raises(RenderError) as error:
        render(node_set_docs=(GPU_NODES,))
    message = str(error.value)
    assert "spec.partitions[1].nodeSets" in message and "'cpu' does not exist" in message and "h100" in message


def test_render_is_deterministic_whatever_the_node_set_order():
    assert render(node_set_docs=(GPU_NODES, CPU_NODES)) == render(node_set_docs=(CPU_NODES, GPU_NODES))
    assert not re.search(r"\{\{|\}\}", render())
