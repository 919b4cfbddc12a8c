import subprocess

import pytest

from kubeslurm.reconcile.scale_down import plan_scale
from kubeslurm.reconcile.slurm_control import SlurmCommandError, SlurmControl, SlurmNode, parse_node_line


def node(name, *states, reason="", features=("h100",)):
    return SlurmNode(name=name, states=set(states or ["IDLE"]), reason=reason, features=list(features))


SCALE_DRAINED = ("IDLE", "DRAIN")
REASON = "kubeslurm: scale-down to 1"


def nodes(*items):
    return {n.name: n for n in items}


CASES = [
    # id, wanted, current, slurm nodes, jobs, running pods -> replicas, drain, resume, delete, waiting
    ("steady", 3, 3, nodes(node("h100-0"), node("h100-1"), node("h100-2")), {}, {"h100-0", "h100-1", "h100-2"},
     3, [], [], [], {}),
    ("scale up", 4, 2, nodes(node("h100-0"), node("h100-1")), {}, {"h100-0", "h100-1"}, 4, [], [], [], {}),
    ("scale down starts by draining the highest ordinals", 1, 3,
     nodes(node("h100-0"), node("h100-1"), node("h100-2")), {}, {"h100-0", "h100-1", "h100-2"},
     3, ["h100-1", "h100-2"], [], [], {}),
    ("drained but a job runs: wait", 1, 3,
     nodes(node("h100-0"), node("h100-1", *SCALE_DRAINED, reason=REASON), node("h100-2", "MIXED", "DRAIN", reason=REASON)),
     {"h100-1": [], "h100-2": ["42"]}, {"h100-0", "h100-1", "h100-2"},
     3, [], [], [], {"h100-2": ["42"]}),
    ("drained and empty: lower replicas, keep records until pods are gone", 1, 3,
     nodes(node("h100-0"), node("h100-1", *SCALE_DRAINED, reason=REASON), node("h100-2", *SCALE_DRAINED, reason=REASON)),
     {"h100-1": [], "h100-2": []}, {"h100-0", "h100-1", "h100-2"},
     1, [], [], [], {}),
    ("pods gone: delete the node records", 1, 1,
     nodes(node("h100-0"), node("h100-1", "DOWN", "DRAIN", reason=REASON), node("h100-2", "DOWN", "DRAIN", reason=REASON)),
     {}, {"h100-0"}, 1, [], [], ["h100-1", "h100-2"], {}),
    ("scaled back up before removal: resume what we drained", 3, 3,
     nodes(node("h100-0"), node("h100-1", *SCALE_DRAINED, reason=REASON), node("h100-2", *SCALE_DRAINED, reason=REASON)),
     {}, {"h100-0", "h100-1", "h100-2"}, 3, [], ["h100-1", "h100-2"], [], {}),
    ("a human's drain is never undone", 3, 3,
     nodes(node("h100-0"), node("h100-1", *SCALE_DRAINED, reason="bad DIMM")), {}, {"h100-0", "h100-1"},
     3, [], [], [], {}),
    ("another NodeSet's nodes are not ours", 1, 1,
     nodes(node("h100-0"), node("h100-9", "DOWN", features=("other",))), {}, {"h100-0"}, 1, [], [], [], {}),
    ("slurmctld unreachable, victim pod running: keep it", 1, 2, None, None, {"h100-0", "h100-1"},
     2, [], [], [], {"h100-1": ["(slurmctld unreachable: cannot tell)"]}),
    ("slurmctld unreachable, victim pod not running: no job can be there", 0, 2, None, None, set(), 0, [], [], [], {}),
]


@pytest.mark.parametrize(
    "wanted,current,slurm,jobs,pods,replicas,drain,resume,delete,waiting", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_plan_scale(wanted, current, slurm, jobs, pods, replicas, drain, resume, delete, waiting):
    plan = plan_scale("h100", wanted, current, slurm, jobs, pods)
    assert (plan.replicas, plan.drain, plan.resume, plan.delete, plan.waiting_for_jobs) == (replicas, drain, resume, delete, waiting)


def test_nodes_drained_while_planning_and_still_empty_lower_the_replicas_in_the_same_reconcile():
    before = nodes(node("h100-0"), node("h100-1"), node("h100-2"))  # read before the drain
    pods = {"h100-0", "h100-1", "h100-2"}
    first = plan_scale("h100", 1, 3, before, {"h100-1": [], "h100-2": []}, pods)
    assert (first.replicas, first.drain) == (3, ["h100-1", "h100-2"])
    drained = frozenset(first.drain)
    again = plan_scale("h100", 1, 3, before, {"h100-1": [], "h100-2": []}, pods, drained_now=drained)
    assert (again.replicas, again.drain, again.resume, again.delete, again.waiting_for_jobs) == (1, [], [], [], {})
    # a job started between the first look and the drain: the replicas wait for it
    raced = plan_scale("h100", 1, 3, before, {"h100-1": [], "h100-2": ["43"]}, pods, drained_now=drained)
    assert (raced.replicas, raced.drain, raced.waiting_for_jobs) == (3, [], {"h100-2": ["43"]})


def test_a_plan_whose_slurm_commands_ran_is_settled_unless_replicas_or_jobs_still_wait():
    """SyncSlurm carries the plan out; the run's status is built from what is left (status.py:
    Ready needs a settled plan), so the run that deleted the last records says Ready."""
    gone = nodes(node("h100-0"), node("h100-1", *SCALE_DRAINED, reason=REASON))
    last_records = plan_scale("h100", 1, 1, gone, {}, {"h100-0"})
    assert last_records.delete == ["h100-1"] and not last_records.settled
    assert last_records.carried_out().settled
    pods = {"h100-0", "h100-1", "h100-2"}
    before = nodes(node("h100-0"), node("h100-1"), node("h100-2"))
    waiting = plan_scale("h100", 1, 3, before, {"h100-1": [], "h100-2": ["43"]}, pods,
                         drained_now=frozenset({"h100-1", "h100-2"}))
    assert not waiting.carried_out().settled  # replicas stay at 3 for job 43
    assert waiting.carried_out().waiting_for_jobs == {"h100-2": ["43"]}


def test_parse_node_line_keeps_spaces_in_values_and_strips_the_reason_stamp():
    line = (
        "NodeName=h100-1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=8 AvailableFeatures=h100,nvlink "
        "ActiveFeatures=h100,nvlink Gres=gpu:h100:8(S:0) NodeAddr=10.0.0.5 NodeHostName=h100-1 "
        "OS=Linux 6.1.0-25-amd64 #1 SMP PREEMPT_DYNAMIC Debian RealMemory=31129 "
        "State=IDLE+DRAIN+DYNAMIC_NORM Partitions=gpu Reason=kubeslurm: scale-down to 1 [root@2026-12-02T10:00:00]"
    )
    parsed = parse_node_line(line)
    assert parsed.name == "h100-1" and parsed.features == ["h100", "nvlink"]
    assert parsed.drained and parsed.drained_by_operator and parsed.gpus == 8
    assert parsed.reason == "kubeslurm: scale-down to 1"
    down = parse_node_line("NodeName=cpu-0 State=DOWN* Gres=(null)")
    assert down.down and down.gpus == 0


# What sacctmgr 24.11 prints, exit code 1, when the real-Slurm tier re-applies the accounts.
@pytest.mark.parametrize("output", [
    " This cluster research already exists.  Not adding.\n",
    " Already existing account vision on cluster research\n",
    "Request didn't affect anything\nNothing added.\nMake sure the accounts requested here have been added to the system/cluster. (sacctmgr add account...)\n",
    " Nothing modified\n",
])
def test_sacctmgr_accepts_work_already_done(output):
    def run(argv, timeout=60):
        return subprocess.CompletedProcess(argv, 1, output, "")
    SlurmControl(run).sacctmgr([["add", "account", "vision", "Cluster=research"]])


def test_sacctmgr_reports_a_real_failure():
    def run(argv, timeout=60):
        return subprocess.CompletedProcess(argv, 1, "", "sacctmgr: error: Problem talking to the database: Connection refused\n")
    with pytest.raises(SlurmCommandError, match="connection refused"):
        SlurmControl(run).sacctmgr([["add", "account", "vision", "Cluster=research"]])


def test_resuming_a_node_slurm_returned_to_service_meanwhile_is_not_a_failure():
    """slurmctld's ReturnToService can resume a node between the reconcile's read and its
    RESUME (seen in the real-Slurm tier): scontrol then refuses, and that is the wanted state."""
    def run(argv, timeout=60):
        return subprocess.CompletedProcess(argv, 1, "", "slurm_update error: Invalid node state specified\n")
    SlurmControl(run).resume(["cpu-0"])

    def broken(argv, timeout=60):
        return subprocess.CompletedProcess(argv, 1, "", "slurm_update error: Unable to contact slurm controller\n")
    with pytest.raises(SlurmCommandError, match="Unable to contact"):
        SlurmControl(broken).resume(["cpu-0"])
