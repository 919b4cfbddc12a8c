"""spec.bridge (Slurm-scheduled pods): the namespace mapping, the slurm.conf it renders, the
placeholder job's commands and the parse of what Slurm allocated to it."""

import pytest

from kubeslurm.api import ManifestError, parse_object
from kubeslurm.api.bridge import BRIDGE_EPILOG, scheduler_name
from kubeslurm.reconcile.bridge_plan import PlaceholderState
from kubeslurm.reconcile.job_allocation import NodeAllocation, parse_job_allocation, parse_placeholder_lines
from kubeslurm.render.bridge.placeholder_job import (
    HOLD_DIR,
    PlaceholderRequest,
    hold_argv,
    release_argv,
    sbatch_argv,
    scancel_argv,
    squeue_placeholders_argv,
)
from kubeslurm.render.config.files import render_config_files
from kubeslurm.render.errors import RenderError

from .manifests import contract_documents, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()  # accounts vision (alice), nlp (bob); partitions gpu, cpu
MAPPING = {"namespace": "inference", "account": "nlp", "user": "bob", "partition": "gpu"}
UID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def bridged(*mappings, enabled=True):
    return set_path(CLUSTER, "spec.bridge", {"enabled": enabled, "namespaces": list(mappings or [MAPPING])})


def slurm_conf(doc) -> str:
    return render_config_files(parse_object(doc), [parse_object(GPU_NODES), parse_object(CPU_NODES)])["slurm.conf"]


def test_the_bridge_is_off_by_default_and_renders_nothing():
    cluster = parse_object(CLUSTER)
    assert not cluster.spec.bridge.enabled and cluster.spec.bridge.namespaces == []
    assert "Epilog" not in slurm_conf(CLUSTER)


def test_a_bridged_cluster_runs_the_bridge_epilog():
    assert f"\nEpilog={BRIDGE_EPILOG}\n" in slurm_conf(bridged())
    assert scheduler_name("research") == "kubeslurm-research"


def test_a_site_epilog_is_kept_without_the_bridge_and_refused_with_it():
    site = set_path(CLUSTER, "spec.slurmConf", {"Epilog": "/etc/slurm/site-epilog"})
    assert "\nEpilog=/etc/slurm/site-epilog\n" in slurm_conf(site)
    with pytest.raises(RenderError, match="spec.slurmConf.epilog: epilog is set by the operator while spec.bridge is enabled"):
        slurm_conf(set_path(bridged(), "spec.slurmConf", {"epilog": "/etc/slurm/site-epilog"}))


@pytest.mark.parametrize(
    "doc,field,message",
    [
        (bridged({**MAPPING, "account": "serving"}), "spec.bridge.namespaces[0].account", "'serving' is not in spec.accounts"),
        (bridged({**MAPPING, "user": "alice"}), "spec.bridge.namespaces[0].user", "not a user of account 'nlp'"),
        (bridged({**MAPPING, "qos": "high"}), "spec.bridge.namespaces[0].qos", "not among account 'nlp''s qos"),
        (bridged({**MAPPING, "partition": "fast"}), "spec.bridge.namespaces[0].partition", "'fast' is not in spec.partitions"),
        (bridged({**MAPPING, "namespace": "Inference"}), "spec.bridge.namespaces[0].namespace", ""),
        (bridged({**MAPPING, "user": "bob;id"}), "spec.bridge.namespaces[0].user", ""),
        (bridged(MAPPING, {**MAPPING, "account": "vision", "user": "alice"}), "spec.bridge", "namespaces must not repeat"),
        (set_path(CLUSTER, "spec.bridge", {"enabled": True}), "spec.bridge", "needs at least one entry in bridge.namespaces"),
        (bridged({**MAPPING, "pods": "all"}), "spec.bridge.namespaces[0].pods", ""),
    ],
)
def test_a_bad_mapping_is_refused_naming_the_field(doc, field, message):
    with pytest.raises(ManifestError) as error:
        parse_object(doc)
    assert field in str(error.value) and message in str(error.value), str(error.value)


def test_a_mapping_may_name_the_builtin_qos_of_an_account_without_qos():
    assert parse_object(bridged({**MAPPING, "qos": "normal"})).spec.bridge.namespaces[0].qos == "normal"


REQUEST = PlaceholderRequest(namespace="inference", pod_name="server-7d9f-x2x", pod_uid=UID,
                             account="serving", user="svc-serving", cpus=4, memory_mib=8192, gpus=2)
COMMON_END = ["--no-requeue", "--chdir=/", "--output=/dev/null", "--wrap=exec sleep infinity"]


@pytest.mark.parametrize(
    "request_,expected_middle",
    [
        (REQUEST, ["--gres=gpu:2"]),
        (PlaceholderRequest(**{**REQUEST.__dict__, "gpus": 0}), []),
        (PlaceholderRequest(**{**REQUEST.__dict__, "qos": "serving", "partition": "gpu"}),
         ["--gres=gpu:2", "--qos=serving", "--partition=gpu"]),
    ],
)
def test_sbatch_asks_for_the_pods_resources_on_behalf_of_the_mapped_user(request_, expected_middle):
    assert sbatch_argv(request_) == [
        "sbatch", "--parsable", "--uid=svc-serving", "--account=serving",
        "--job-name=kubeslurm-pod:inference/server-7d9f-x2x", f"--comment=kubeslurm.io/pod-uid={UID}",
        "--nodes=1", "--ntasks=1", "--cpus-per-task=4", "--mem=8192M", *expected_middle, *COMMON_END,
    ]


@pytest.mark.parametrize(
    "change",
    [
        {"pod_name": "x --uid=root"}, {"pod_name": "a\nb"}, {"namespace": "kube_system"}, {"pod_uid": "not-a-uid"},
        {"account": "a,b"}, {"user": "root;x"}, {"qos": "--x"}, {"partition": "p q"},
        {"cpus": 0}, {"cpus": True}, {"memory_mib": 1.5}, {"gpus": -1},
    ],
)
def test_sbatch_refuses_a_value_outside_its_pattern(change):
    with pytest.raises(ValueError):
        sbatch_argv(PlaceholderRequest(**{**REQUEST.__dict__, **change}))


def test_cancel_hold_and_release_name_the_job_and_nothing_else():
    assert scancel_argv("42") == ["scancel", "42"]
    assert hold_argv("42") == ["install", "-D", "-m", "0600", "/dev/null", f"{HOLD_DIR}/42"]
    assert release_argv("42") == ["rm", "-f", f"{HOLD_DIR}/42"]
    for bad in ("", "0", "42 43", "../x", "42/..", "-1"):
        for command in (scancel_argv, hold_argv, release_argv):
            with pytest.raises(ValueError):
                command(bad)


# Trimmed `scontrol --details show job` output of Slurm 24.11 (the real-Slurm tier parses the real one).
RUNNING = """JobId=7 JobName=kubeslurm-pod:inference/server-0
   UserId=svc-serving(2000) GroupId=svc-serving(2000) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=gpu-0
   NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
     Nodes=gpu-0 CPU_IDs=0-1 Mem=512 GRES=gpu:a100:2(IDX:1-2)
   TresPerNode=gres/gpu:2
"""
TWO_NODES = """JobId=9 JobName=x
   JobState=RUNNING Reason=None Dependency=(null)
     Nodes=h100-[0-1] CPU_IDs=0-3 Mem=1024 GRES=gpu:h100:3(IDX:0,2,5-6)
     Nodes=h100-3 CPU_IDs=0 Mem=100 GRES=gpu:1(IDX:7),shard:0(IDX:N/A)
"""
PENDING = "JobId=8 JobName=x\n   JobState=PENDING Reason=Resources Dependency=(null)\n   NodeList=\n"
CPU_ONLY = "JobId=10 JobName=x\n   JobState=RUNNING Reason=None\n     Nodes=cpu-1 CPU_IDs=2-3 Mem=500 GRES=\n"


@pytest.mark.parametrize(
    "text,state,reason,nodes",
    [
        (RUNNING, "RUNNING", "None", {"gpu-0": NodeAllocation("0-1", 512, (1, 2))}),
        (TWO_NODES, "RUNNING", "None", {"h100-0": NodeAllocation("0-3", 1024, (0, 2, 5, 6)),
                                         "h100-1": NodeAllocation("0-3", 1024, (0, 2, 5, 6)),
                                         "h100-3": NodeAllocation("0", 100, (7,))}),
        (PENDING, "PENDING", "Resources", {}),
        (CPU_ONLY, "RUNNING", "None", {"cpu-1": NodeAllocation("2-3", 500, ())}),
    ],
)
def test_the_allocation_names_each_nodes_gpu_indices(text, state, reason, nodes):
    allocation = parse_job_allocation(text)
    assert (allocation.state, allocation.reason, allocation.nodes) == (state, reason, nodes)


def test_output_that_is_not_a_job_is_refused():
    with pytest.raises(ValueError, match="not the output of `scontrol show job`"):
        parse_job_allocation("slurm_load_jobs error: Invalid job id specified")


def test_squeue_lists_the_bridge_users_jobs_once():
    assert squeue_placeholders_argv(["svc-b", "svc-a", "svc-b"]) == [
        "squeue", "--noheader", "--all", "--user=svc-a,svc-b", "--format=%i|%T|%N|%r|%j|%k"]
    for bad in ([], ["a,b"], ["--all"]):
        with pytest.raises(ValueError):
            squeue_placeholders_argv(bad)


def test_only_placeholder_lines_are_read_as_placeholders():
    text = "\n".join([
        f"7|RUNNING|gpu-0|None|kubeslurm-pod:inference/server-0|kubeslurm.io/pod-uid={UID}",
        f"8|PENDING||Resources|kubeslurm-pod:inference/server-1|kubeslurm.io/pod-uid={UID.replace('0f', '1f')}",
        f"9|COMPLETING|gpu-[0-1]|None|kubeslurm-pod:inference/gang|kubeslurm.io/pod-uid={UID}",
        "10|RUNNING|gpu-0|None|train|(null)",  # the bridge user's own job: not a placeholder
        f"11|RUNNING|gpu-0|None|kubeslurm-pod:inference/x|kubeslurm.io/pod-uid={UID}|forged",
        f"12|RUNNING|gpu-0|None|kubeslurm-pod:x|y|kubeslurm.io/pod-uid={UID}",
    ])
    assert parse_placeholder_lines(text) == [
        PlaceholderState("7", "RUNNING", UID, ("gpu-0",), "None"),
        PlaceholderState("8", "PENDING", UID.replace("0f", "1f"), (), "Resources"),
        PlaceholderState("9", "COMPLETING", UID, ("gpu-0", "gpu-1"), "None"),
    ]


UIDS = (UID, UID.replace("0f", "1f"))


def test_a_pod_groups_job_asks_for_a_node_per_member_and_names_every_member():
    request = PlaceholderRequest(**{**REQUEST.__dict__, "group": "train", "group_uids": UIDS})
    assert sbatch_argv(request) == [
        "sbatch", "--parsable", "--uid=svc-serving", "--account=serving",
        "--job-name=kubeslurm-group:inference/train", f"--comment=kubeslurm.io/pod-uids={UIDS[0]},{UIDS[1]}",
        "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=4", "--mem=8192M", "--gres=gpu:2", *COMMON_END,
    ]


@pytest.mark.parametrize("change", [
    {"group": "Train"}, {"group": "a,b"}, {"group": "x --uid=root"}, {"group_uids": ()}, {"group_uids": (UID, UID)},
    {"group_uids": (UID, "not-a-uid")}, {"group_uids": tuple(f"{i:08x}-0000-4000-8000-000000000000" for i in range(65))},
])
def test_a_pod_groups_job_refuses_a_value_outside_its_pattern(change):
    with pytest.raises(ValueError):
        sbatch_argv(PlaceholderRequest(**{**REQUEST.__dict__, "group": "train", "group_uids": UIDS, **change}))


def test_a_pod_groups_job_is_read_back_with_every_member():
    text = "\n".join([
        f"20|RUNNING|gpu-[0-1]|None|kubeslurm-group:inference/train|kubeslurm.io/pod-uids={UIDS[0]},{UIDS[1]}",
        f"21|PENDING||Resources|kubeslurm-group:inference/solo|kubeslurm.io/pod-uids={UIDS[0]}",
        f"22|RUNNING|gpu-0|None|kubeslurm-group:inference/x|kubeslurm.io/pod-uids={UIDS[0]},forged",
        f"23|RUNNING|gpu-0|None|kubeslurm-group:inference/x|kubeslurm.io/pod-uid={UIDS[0]}",
        f"24|RUNNING|gpu-0|None|kubeslurm-pod:inference/x|kubeslurm.io/pod-uids={UIDS[0]}",
    ])
    assert parse_placeholder_lines(text) == [
        PlaceholderState("20", "RUNNING", UIDS[0], ("gpu-0", "gpu-1"), "None", UIDS),
        PlaceholderState("21", "PENDING", UIDS[0], (), "Resources", (UIDS[0],)),
    ]
