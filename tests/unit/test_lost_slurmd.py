"""When the operator tells Slurm that a slurmd is gone for good, and when it gives the node back."""

import pytest

from kubeslurm.reconcile.lost_slurmd import lost_slurmd_actions
from kubeslurm.reconcile.slurm_control import SlurmCommandError, SlurmJob, SlurmNode, parse_job_line
from kubeslurm.reconcile.slurm_hostlist import expand

T0 = 1_780_000_000  # a job's start, epoch seconds
BEFORE = "2026-05-28T20:26:00Z"  # T0 - 40 s
AFTER = "2026-05-28T20:27:30Z"  # T0 + 50 s


def pod(name, node="k1", created=BEFORE, ready=True, slurmd_started=BEFORE):
    running = {"running": {"startedAt": slurmd_started}} if slurmd_started else {"waiting": {"reason": "CrashLoopBackOff"}}
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "containerStatuses": [{"name": "slurmd", "state": running}]},
    }


K8S = {"k1": {"metadata": {"name": "k1"}}, "k2": {"metadata": {"name": "k2"}}}


def job(nodes, state="RUNNING", start=T0, id="7"):
    return SlurmJob(id, state, start, tuple(nodes))


def slurm(name, *states, reason=""):
    return {name: SlurmNode(name, set(states) or {"ALLOCATED"}, reason=reason)}


@pytest.mark.parametrize(
    "pods, nodes, jobs, down",
    [
        # the pod that ran the job still runs: nothing to do
        ([pod("cpu-1")], slurm("cpu-1"), [job(["cpu-1"])], {}),
        # its Kubernetes node was deleted (power loss, then the cloud removed it)
        ([pod("cpu-1", node="gone")], slurm("cpu-1"), [job(["cpu-1"])],
         {"cpu-1": "slurmd pod lost: Kubernetes node gone is gone (jobs 7)"}),
        # the pod was garbage-collected and not yet made anew (another pod keeps the listing honest)
        ([pod("cpu-0")], {**slurm("cpu-0", "IDLE"), **slurm("cpu-1")}, [job(["cpu-1"])],
         {"cpu-1": "slurmd pod lost: pod cpu-1 is gone (jobs 7)"}),
        # a new pod under the same name, created after the job started: the job is not in it
        ([pod("cpu-1", created=AFTER)], slurm("cpu-1"), [job(["cpu-1"])],
         {"cpu-1": "slurmd pod lost: pod cpu-1 was replaced after jobs 7 started on it"}),
        # the same pod, but its slurmd container restarted (a crash, the OOM killer) after the job started:
        # the job's steps died with the container
        ([pod("cpu-1", slurmd_started=AFTER)], slurm("cpu-1"), [job(["cpu-1"])],
         {"cpu-1": "slurmd pod lost: slurmd of pod cpu-1 restarted after jobs 7 started on it"}),
        # a container that is not running (yet) proves nothing by itself
        ([pod("cpu-1", slurmd_started=None)], slurm("cpu-1"), [job(["cpu-1"])], {}),
        # a multi-node job counts on each of its nodes
        ([pod("cpu-0"), pod("cpu-1", created=AFTER)], {**slurm("cpu-0"), **slurm("cpu-1")}, [job(["cpu-0", "cpu-1"])],
         {"cpu-1": "slurmd pod lost: pod cpu-1 was replaced after jobs 7 started on it"}),
        # already DOWN (the preStop hook ran, or our earlier reconcile): Slurm has requeued already
        ([pod("cpu-1", created=AFTER)], slurm("cpu-1", "DOWN", "ALLOCATED"), [job(["cpu-1"])], {}),
        # a node without jobs loses nothing: the StatefulSet brings the pod back and slurmd re-registers
        ([pod("cpu-1", node="gone")], slurm("cpu-1", "IDLE"), [], {}),
        # pending jobs hold no node
        ([pod("cpu-1", created=AFTER)], slurm("cpu-1", "IDLE"), [job(["cpu-1"], state="PENDING", start=None)], {}),
        # a NOT_RESPONDING node whose pod moved is still DOWNed (only DOWN means requeued)
        ([pod("cpu-1", node="gone")], slurm("cpu-1", "ALLOCATED", "NOT_RESPONDING"), [job(["cpu-1"])],
         {"cpu-1": "slurmd pod lost: Kubernetes node gone is gone (jobs 7)"}),
    ],
)
def test_lost_slurmd_is_marked_down(pods, nodes, jobs, down):
    assert lost_slurmd_actions(pods, K8S, nodes, jobs) == (down, [])


def test_empty_listings_are_no_evidence():
    nodes, jobs = slurm("cpu-1"), [job(["cpu-1"])]
    assert lost_slurmd_actions([], K8S, nodes, jobs) == ({}, [])
    assert lost_slurmd_actions([pod("cpu-1")], {}, nodes, jobs) == ({}, [])


def test_our_lost_down_is_resumed_once_the_new_pod_is_ready():
    ours = "kubeslurm: slurmd pod lost: Kubernetes node k9 is gone (jobs 7)"
    down = slurm("cpu-1", "DOWN", "IDLE", reason=ours)
    assert lost_slurmd_actions([pod("cpu-1", created=AFTER)], K8S, down, []) == ({}, ["cpu-1"])
    # not yet Ready, still not responding, or a job from before the pod still counted: wait
    assert lost_slurmd_actions([pod("cpu-1", created=AFTER, ready=False)], K8S, down, []) == ({}, [])
    silent = slurm("cpu-1", "DOWN", "IDLE", "NOT_RESPONDING", reason=ours)
    assert lost_slurmd_actions([pod("cpu-1", created=AFTER)], K8S, silent, []) == ({}, [])
    # DOWN over an earlier health drain (the Kubernetes node went NotReady first) stays drained after
    # slurmd registers again: resumed as well
    drained = slurm("cpu-1", "IDLE", "DRAIN", reason=ours)
    assert lost_slurmd_actions([pod("cpu-1", created=AFTER)], K8S, drained, []) == ({}, ["cpu-1"])
    # a DOWN set by a human, or by the preStop hook (ReturnToService=2 lifts that), is left alone
    human = slurm("cpu-1", "DOWN", "IDLE", reason="bad GPU")
    assert lost_slurmd_actions([pod("cpu-1")], K8S, human, []) == ({}, [])


@pytest.mark.parametrize(
    "hostlist, hosts",
    [
        ("cpu-0", ["cpu-0"]),
        ("cpu-[0-2]", ["cpu-0", "cpu-1", "cpu-2"]),
        ("cpu-[0,3-4],h100-1", ["cpu-0", "cpu-3", "cpu-4", "h100-1"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("r[1-2]n[1,3]", ["r1n1", "r1n3", "r2n1", "r2n3"]),
        ("a,b", ["a", "b"]),
        ("", []),
    ],
)
def test_hostlists_expand_like_scontrol_show_hostnames(hostlist, hosts):
    assert expand(hostlist) == hosts


@pytest.mark.parametrize(("line", "job"), [
    ("12|RUNNING|1780000000|cpu|vision|None|cpu-[0-1]",
     SlurmJob("12", "RUNNING", 1780000000, ("cpu-0", "cpu-1"), partition="cpu", account="vision", reason="None")),
    ("13|PENDING|N/A|h100|nlp|Resources|", SlurmJob("13", "PENDING", None, (), "h100", "nlp", "Resources")),
    # a reason may hold spaces, commas and a hostlist of its own
    ("14|PENDING|N/A|h100,cpu|nlp|ReqNodeNotAvail, UnavailableNodes:h100-[0-1]|",
     SlurmJob("14", "PENDING", None, (), "h100,cpu", "nlp", "ReqNodeNotAvail, UnavailableNodes:h100-[0-1]")),
])
def test_squeue_lines_parse_with_epoch_start_times(line, job):
    assert parse_job_line(line) == job


def test_a_pending_array_holds_no_node():
    assert parse_job_line("13_[1-3]|PENDING|1780000100|cpu|vision|Priority|").holds_nodes is False


def test_output_that_is_not_squeue_s_is_a_command_error_not_a_crash():
    with pytest.raises(SlurmCommandError, match="unexpected squeue line"):
        parse_job_line('unable to upgrade connection: container not found ("slurmctld")')
