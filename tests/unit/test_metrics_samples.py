"""What a reconcile observed of Slurm, as metric samples: counts, bounded labels, nothing stale."""

from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kubeslurm.metrics.cluster_collector import ClusterStateCollector
from kubeslurm.metrics.operator_metrics import slurm_command_name
from kubeslurm.metrics.slurm_state import (
    FAMILIES, NODE_STATES, node_state, pending_reason, slurm_state_samples,
)
from kubeslurm.reconcile.slurm_control import SlurmJob, SlurmNode, parse_node_line

NODE_SETS = ["h100", "cpu"]


def node(name, states, cpus=8, allocated_cpus=0, gres="", allocated_gpus=0, partitions=("gpu",)):
    return SlurmNode(name, set(states), gres=gres, features=[name.split("-")[0]], cpus=cpus,
                     allocated_cpus=allocated_cpus, allocated_gpus=allocated_gpus, partitions=list(partitions))


def job(id, state, partition="gpu", account="vision", reason="None"):
    return SlurmJob(id, state, None, (), partition=partition, account=account, reason=reason)


def values(samples, name):
    """labels -> value of one family's samples."""
    return {s.labels: s.value for s in samples if s.name == name}


def by_label(samples, name, label):
    """One label's value -> value, for the samples of `name` whose other labels are all equal."""
    return {dict(labels)[label]: value for labels, value in values(samples, name).items()}


@pytest.mark.parametrize(("states", "expected"), [
    ({"IDLE", "DYNAMIC_NORM"}, "idle"),
    ({"MIXED"}, "mixed"),
    ({"ALLOCATED"}, "allocated"),
    ({"IDLE", "DRAIN"}, "drained"),
    ({"MIXED", "DRAIN"}, "draining"),
    ({"ALLOCATED", "DRAIN"}, "draining"),
    ({"IDLE", "NOT_RESPONDING"}, "down"),  # State=IDLE* : slurmd stopped answering
    ({"DOWN", "DRAIN"}, "down"),
    ({"FUTURE"}, "future"),
    ({"WEIRD"}, "unknown"),
])
def test_each_node_counts_in_one_state(states, expected):
    assert node_state(SlurmNode("n", states)) == expected


@pytest.mark.parametrize(("reason", "expected"), [
    ("Resources", "Resources"),
    ("Priority", "Priority"),
    ("ReqNodeNotAvail, UnavailableNodes:h100-[0-1]", "ReqNodeNotAvail"),
    ("AssocGrpGRES", "AssocGrpGRES"),
    ("BeginTime", "BeginTime"),
    ("launch failed requeued held", "launch"),
    ("", "None"),
])
def test_a_pending_reason_is_its_leading_word_never_a_node_list(reason, expected):
    assert pending_reason(reason) == expected


def test_nodes_cpus_and_gpus_by_node_set_and_partition():
    nodes = [
        node("h100-0", {"MIXED"}, cpus=8, allocated_cpus=2, gres="gpu:h100:8(S:0)", allocated_gpus=2, partitions=["gpu", "all"]),
        node("h100-1", {"ALLOCATED"}, cpus=8, allocated_cpus=8, gres="gpu:h100:8", allocated_gpus=8, partitions=["gpu", "all"]),
        node("h100-2", {"IDLE", "DRAIN"}, cpus=8, gres="gpu:h100:8", partitions=["gpu", "all"]),
        node("cpu-0", {"IDLE"}, cpus=4, partitions=["cpu", "all"]),
        node("stray-0", {"IDLE"}, cpus=2, partitions=[]),  # a node of no NodeSet (made by hand)
    ]
    samples = slurm_state_samples(NODE_SETS, nodes, [], None, slurmdbd_up=True)
    nodes_of = lambda node_set: {dict(l)["state"]: v for l, v in values(samples, "kubeslurm_slurm_nodes").items()
                                 if dict(l)["nodeset"] == node_set}
    assert nodes_of("h100") == {**dict.fromkeys(NODE_STATES, 0), "mixed": 1, "allocated": 1, "drained": 1}
    assert nodes_of("cpu") == {**dict.fromkeys(NODE_STATES, 0), "idle": 1}
    assert nodes_of("") == {**dict.fromkeys(NODE_STATES, 0), "idle": 1}
    in_partition = lambda p: {dict(l)["state"]: v for l, v in values(samples, "kubeslurm_slurm_partition_nodes").items()
                              if dict(l)["partition"] == p and v}
    assert in_partition("all") == {"mixed": 1, "allocated": 1, "drained": 1, "idle": 1}
    assert in_partition("gpu") == {"mixed": 1, "allocated": 1, "drained": 1}
    assert in_partition("cpu") == {"idle": 1}
    resources = {name: by_label(samples, "kubeslurm_slurm_" + name, "nodeset")
                 for name in ("cpus", "allocated_cpus", "idle_cpus", "gpus", "allocated_gpus", "idle_gpus")}
    assert resources == {
        "cpus": {"h100": 24, "cpu": 4, "": 2},
        "allocated_cpus": {"h100": 10, "cpu": 0, "": 0},
        "idle_cpus": {"h100": 6, "cpu": 4, "": 2},  # the drained node's 8 CPUs are not idle
        "gpus": {"h100": 24, "cpu": 0, "": 0},
        "allocated_gpus": {"h100": 10, "cpu": 0, "": 0},
        "idle_gpus": {"h100": 6, "cpu": 0, "": 0},
    }
    assert values(samples, "kubeslurm_slurmctld_up") == {(): 1}
    assert values(samples, "kubeslurm_slurmdbd_up") == {(): 1}


def test_a_node_set_without_slurm_nodes_reports_zeros_not_nothing():
    samples = slurm_state_samples(["h100"], [], [], None, slurmdbd_up=None)
    assert set(by_label(samples, "kubeslurm_slurm_nodes", "state").values()) == {0}
    assert by_label(samples, "kubeslurm_slurm_gpus", "nodeset") == {"h100": 0}
    assert values(samples, "kubeslurm_slurmdbd_up") == {}  # no accounting, no slurmdbd


def test_jobs_by_partition_account_and_state_and_pending_by_reason():
    jobs = [
        job("1", "RUNNING"), job("2", "RUNNING"), job("3", "PENDING", reason="Resources"),
        job("4", "PENDING", reason="Priority"), job("5", "PENDING", reason="Priority"),
        job("6", "PENDING", partition="cpu", account="nlp", reason="ReqNodeNotAvail, UnavailableNodes:cpu-0"),
        job("7", "COMPLETING", partition="cpu", account="nlp"),
    ]
    samples = slurm_state_samples(NODE_SETS, [], jobs, None, slurmdbd_up=None)
    assert values(samples, "kubeslurm_slurm_jobs") == {
        (("partition", "gpu"), ("account", "vision"), ("state", "running")): 2,
        (("partition", "gpu"), ("account", "vision"), ("state", "pending")): 3,
        (("partition", "cpu"), ("account", "nlp"), ("state", "pending")): 1,
        (("partition", "cpu"), ("account", "nlp"), ("state", "completing")): 1,
    }
    assert values(samples, "kubeslurm_slurm_pending_jobs") == {
        (("partition", "gpu"), ("reason", "Resources")): 1,
        (("partition", "gpu"), ("reason", "Priority")): 2,
        (("partition", "cpu"), ("reason", "ReqNodeNotAvail")): 1,
    }
    labels = {key for s in samples for key, _ in s.labels}
    assert labels <= {"nodeset", "partition", "account", "state", "reason", "scheduler", "stat", "event"}


def test_slurm_not_answering_reports_it_down_and_no_stale_counts():
    samples = slurm_state_samples(NODE_SETS, None, None, {"main_cycles": 3}, slurmdbd_up=False)
    assert {s.name: s.value for s in samples} == {"kubeslurm_slurmctld_up": 0, "kubeslurm_slurmdbd_up": 0}


def test_sdiag_statistics_become_seconds_and_labelled_families():
    stats = {"main_last_cycle_us": 85, "backfill_mean_cycle_us": 350, "main_cycles": 31,
             "backfill_last_depth": 4, "backfilled_jobs": 2, "jobs_failed": 1, "dbd_agent_queue_size": 5}
    samples = slurm_state_samples(NODE_SETS, [], [], stats, slurmdbd_up=None)
    assert values(samples, "kubeslurm_slurm_scheduler_cycle_seconds") == {
        (("scheduler", "main"), ("stat", "last")): pytest.approx(85e-6),
        (("scheduler", "backfill"), ("stat", "mean")): pytest.approx(350e-6),
    }
    assert values(samples, "kubeslurm_slurm_scheduler_cycles") == {(("scheduler", "main"),): 31}
    assert values(samples, "kubeslurm_slurm_scheduler_depth") == {(("scheduler", "backfill"), ("stat", "last")): 4}
    assert values(samples, "kubeslurm_slurm_backfilled_jobs") == {(): 2}
    assert values(samples, "kubeslurm_slurm_scheduler_jobs") == {(("event", "failed"),): 1}
    assert values(samples, "kubeslurm_slurm_dbd_agent_queue_size") == {(): 5}


def test_parse_node_line_reads_cpus_allocated_gpus_and_partitions():
    line = ("NodeName=h100-0 CoresPerSocket=1 CPUAlloc=3 CPUEfctv=8 CPUTot=8 CPULoad=0.00 "
            "AvailableFeatures=h100,nvlink ActiveFeatures=h100,nvlink Gres=gpu:h100:8(S:0) NodeAddr=10.0.0.5 "
            "State=MIXED+DYNAMIC_NORM Partitions=h100,all CfgTRES=cpu=8,mem=31129M,billing=8,gres/gpu=8 "
            "AllocTRES=cpu=3,gres/gpu=2")
    parsed = parse_node_line(line)
    assert (parsed.cpus, parsed.allocated_cpus, parsed.gpus, parsed.allocated_gpus, parsed.partitions) == (
        8, 3, 8, 2, ["h100", "all"])
    idle = parse_node_line("NodeName=cpu-0 CPUAlloc=0 CPUTot=4 Gres=(null) State=IDLE Partitions=cpu AllocTRES=")
    assert (idle.cpus, idle.allocated_cpus, idle.allocated_gpus, idle.partitions) == (4, 0, 0, ["cpu"])


@pytest.mark.parametrize(("argv", "name"), [
    (["scontrol", "--oneliner", "show", "nodes"], "scontrol show"),
    (["scontrol", "update", "NodeName=h100-1", "State=DRAIN", "Reason=kubeslurm: x"], "scontrol update"),
    (["env", "SLURM_TIME_FORMAT=%s", "squeue", "--noheader", "--all", "--format=%i"], "squeue"),
    (["sacctmgr", "--immediate", "add", "user", "alice", "account=vision"], "sacctmgr add"),
    (["sacctmgr", "--noheader", "--parsable2", "show", "assoc"], "sacctmgr show"),
    (["sdiag"], "sdiag"),
    (["/usr/bin/scontrol", "ping"], "scontrol ping"),
])
def test_a_slurm_command_is_named_by_program_and_subcommand_never_its_arguments(argv, name):
    assert slurm_command_name(argv) == name


def scrape(collector) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_the_collector_serves_each_cluster_s_latest_samples_and_forgets_a_deleted_one():
    collector = ClusterStateCollector()
    nodes = [node("h100-0", {"IDLE"}, gres="gpu:h100:8")]
    collector.publish("hpc", "research", slurm_state_samples(["h100"], nodes, [job("1", "PENDING")], None, True))
    collector.publish("lab", "small", slurm_state_samples(["cpu"], None, None, None, None))
    scraped = scrape(collector)
    assert {(s.labels["namespace"], s.labels["cluster"], s.value) for s in scraped["kubeslurm_slurmctld_up"]} == {
        ("hpc", "research", 1), ("lab", "small", 0)}
    (gpus,) = scraped["kubeslurm_slurm_gpus"]
    assert gpus.labels == {"namespace": "hpc", "cluster": "research", "nodeset": "h100"} and gpus.value == 8
    # a later reconcile replaces the samples whole: the pending job's series is gone with it
    collector.publish("hpc", "research", slurm_state_samples(["h100"], nodes, [], None, True))
    assert "kubeslurm_slurm_jobs" not in scrape(collector)
    collector.forget("hpc", "research")
    scraped = scrape(collector)
    assert {s.labels["cluster"] for family in scraped.values() for s in family} == {"small"}


def test_every_metric_is_documented_in_the_readme():
    import kubeslurm.metrics.operator_metrics  # noqa: F401  registers the operator's own

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    registered = [f.name for f in text_string_to_metric_families(generate_latest(REGISTRY).decode())]
    ours = [name for name in [*registered, *FAMILIES] if name.startswith("kubeslurm_")]
    missing = [name for name in ours if f"`{name}`" not in readme and f"`{name}_total`" not in readme]
    assert len(ours) > len(FAMILIES) and missing == [], "README's Metrics section lists every metric"
