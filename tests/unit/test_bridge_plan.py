"""The bridge's decision (reconcile/bridge_plan.py): from one listing of pods and one of
placeholder jobs, what to submit, bind, cancel, delete and release."""

import pytest

from kubeslurm.reconcile.bridge_plan import BridgedPod, Binding, BridgePlan, PlaceholderState, PodGroup, plan_bridge

NODES = {"gpu-0": "node-a", "gpu-1": "node-b"}  # slurmd pod (= Slurm node) -> Kubernetes node
POD = BridgedPod("inference", "server-0", "uid-0")
BOUND = BridgedPod("inference", "server-0", "uid-0", node_name="node-a")


def job(state, uid="uid-0", job_id="7", nodes=("gpu-0",), reason="None"):
    return PlaceholderState(job_id, state, uid, nodes if state != "PENDING" else (), reason)


def pod(**change):
    return BridgedPod(**{**POD.__dict__, **change})


CASES = [
    # (id, pods, jobs, expected plan)
    ("new pod: submitted", [POD], [], BridgePlan(submit=[POD])),
    ("a pod that cannot be asked for: its problem shown, nothing submitted", [pod(problem="set memory")], [],
     BridgePlan(pending=[(pod(problem="set memory"), "set memory")])),
    ("its problem shown already: nothing", [pod(problem="set memory", pending_message="set memory")], [], BridgePlan()),
    ("waiting: Slurm's reason shown", [POD], [job("PENDING", reason="Resources")],
     BridgePlan(pending=[(POD, "Slurm job 7 pending: Resources")])),
    ("waiting, reason already shown: nothing", [pod(pending_message="Slurm job 7 pending: Resources")],
     [job("PENDING", reason="Resources")], BridgePlan()),
    ("running: bound to the slurmd pod's node", [POD], [job("RUNNING")],
     BridgePlan(bind=[Binding(POD, "7", ("gpu-0",), "node-a")])),
    ("running and bound: nothing", [BOUND], [job("RUNNING")], BridgePlan()),
    ("running, slurmd pod not placed: wait", [POD], [job("RUNNING", nodes=("gpu-9",))], BridgePlan()),
    ("bound elsewhere than its allocation: deleted", [BOUND], [job("RUNNING", nodes=("gpu-1",))],
     BridgePlan(delete_pods=[BOUND])),
    ("bound, job preempted (completing): pod deleted, GPUs kept", [BOUND], [job("COMPLETING")],
     BridgePlan(delete_pods=[BOUND])),
    ("bound, job gone: pod deleted", [BOUND], [], BridgePlan(delete_pods=[BOUND])),
    ("bound, job ended long ago: pod deleted", [BOUND], [job("CANCELLED")], BridgePlan(delete_pods=[BOUND])),
    ("pod deleting, job running: cancelled", [pod(node_name="node-a", deleting=True)], [job("RUNNING")],
     BridgePlan(cancel=["7"])),
    ("pod deleting, job completing: still held", [pod(node_name="node-a", deleting=True)], [job("COMPLETING")],
     BridgePlan()),
    ("pod finished, job completing: released", [pod(node_name="node-a", deleting=True, finished=True)],
     [job("COMPLETING")], BridgePlan(release=[("7", ("gpu-0",))])),
    ("pod gone, job completing: released", [], [job("COMPLETING")], BridgePlan(release=[("7", ("gpu-0",))])),
    ("pod gone, job running (orphan): cancelled", [], [job("RUNNING")], BridgePlan(cancel=["7"])),
    ("pod gone, job pending (orphan): cancelled", [], [job("PENDING")], BridgePlan(cancel=["7"])),
    ("pod gone, job ended: nothing", [], [job("COMPLETED")], BridgePlan()),
    ("unbound pod deleting, job pending: cancelled", [pod(deleting=True)], [job("PENDING")], BridgePlan(cancel=["7"])),
    ("never bound, job ended early: released, no new job until it leaves squeue",
     [POD], [job("COMPLETING")], BridgePlan(release=[("7", ("gpu-0",))])),
    ("two jobs for one pod: the newer is cancelled", [POD],
     [job("PENDING", job_id="9"), job("PENDING", job_id="7")],
     BridgePlan(cancel=["9"], pending=[(POD, "Slurm job 7 pending: None")])),
    ("one GPU pod admitting per node: the second waits",
     [pod(gpus=1, node_name="node-a"), pod(uid="uid-1", name="server-1", gpus=1)],
     [job("RUNNING", job_id="7"), job("RUNNING", uid="uid-1", job_id="8")], BridgePlan()),
    ("once the first is admitted, the second is bound",
     [pod(gpus=1, node_name="node-a", admitted=True), pod(uid="uid-1", name="server-1", gpus=1)],
     [job("RUNNING", job_id="7"), job("RUNNING", uid="uid-1", job_id="8")],
     BridgePlan(bind=[Binding(pod(uid="uid-1", name="server-1", gpus=1), "8", ("gpu-0",), "node-a")])),
    ("two GPU pods running on one node: one bound per pass",
     [pod(gpus=1), pod(uid="uid-1", name="server-1", gpus=1)],
     [job("RUNNING", job_id="7"), job("RUNNING", uid="uid-1", job_id="8")],
     BridgePlan(bind=[Binding(pod(gpus=1), "7", ("gpu-0",), "node-a")])),
    ("CPU-only pods are bound together; another node's GPU pod too",
     [pod(), pod(uid="uid-1", name="server-1"), pod(uid="uid-2", name="server-2", gpus=1, node_name="node-a"),
      pod(uid="uid-3", name="server-3", gpus=2)],
     [job("RUNNING", job_id="7"), job("RUNNING", uid="uid-1", job_id="8"), job("RUNNING", uid="uid-2", job_id="9"),
      job("RUNNING", uid="uid-3", job_id="10", nodes=("gpu-1",))],
     BridgePlan(bind=[Binding(pod(), "7", ("gpu-0",), "node-a"),
                      Binding(pod(uid="uid-1", name="server-1"), "8", ("gpu-0",), "node-a"),
                      Binding(pod(uid="uid-3", name="server-3", gpus=2), "10", ("gpu-1",), "node-b")])),
    ("a multi-node job for one pod: cancelled", [POD], [job("RUNNING", nodes=("gpu-0", "gpu-1"))],
     BridgePlan(cancel=["7"])),
]


@pytest.mark.parametrize("pods,jobs,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_plan(pods, jobs, expected):
    assert plan_bridge(pods, jobs, NODES) == expected


def test_the_plan_of_a_settled_bridge_is_empty_and_repeatable():
    pods = [BOUND, pod(uid="uid-1", name="server-1", pending_message="Slurm job 8 pending: Priority")]
    jobs = [job("RUNNING"), job("PENDING", uid="uid-1", job_id="8", reason="Priority")]
    assert plan_bridge(pods, jobs, NODES).empty
    assert plan_bridge(pods, jobs, NODES) == plan_bridge(list(reversed(pods)), list(reversed(jobs)), NODES)


# -- pod groups (gang): one job of N nodes for N pods ------------------------------------------
def member(index: int, **change) -> BridgedPod:
    return BridgedPod(**{**POD.__dict__, "name": f"train-{index}", "uid": f"uid-g{index}", "group": "train",
                         "group_size": 2, **change})


def group_job(state, job_id="20", nodes=("gpu-0", "gpu-1"), uids=("uid-g0", "uid-g1"), reason="None"):
    return PlaceholderState(job_id, state, uids[0], nodes if state not in ("PENDING",) else (), reason, uids)


GROUP = (member(0), member(1))
GROUP_CASES = [
    ("a whole group: one job for both", list(GROUP), [], BridgePlan(submit_groups=[PodGroup("inference", "train", GROUP)])),
    ("one of two: none submitted, the pod told why", [member(0)], [],
     BridgePlan(pending=[(member(0), "pod group train: 1 of 2 pods exist; its Slurm job is asked for once all do")])),
    ("three of two: refused on each", [member(0), member(1), member(2)], [],
     BridgePlan(pending=[(member(i), "not scheduled by Slurm: pod group train has 3 pods but "
                                     "kubeslurm.io/pod-group-size says 2") for i in range(3)])),
    ("sizes that differ: refused", [member(0), member(1, group_size=3)], [],
     BridgePlan(pending=[(m, "not scheduled by Slurm: the pods of group train give different sizes (2, 3) in "
                             "kubeslurm.io/pod-group-size: give them one") for m in (member(0), member(1, group_size=3))])),
    ("GPU counts that differ: refused", [member(0, gpus=1), member(1, gpus=2)], [],
     BridgePlan(pending=[(m, "not scheduled by Slurm: the pods of group train ask for different numbers of "
                             "kubeslurm.io/gpu: a group is one Slurm job with the same resources on each of its nodes")
                         for m in (member(0, gpus=1), member(1, gpus=2))])),
    ("waiting: every member shows Slurm's reason", list(GROUP), [group_job("PENDING", reason="Resources")],
     BridgePlan(pending=[(m, "Slurm job 20 pending: Resources") for m in GROUP])),
    ("running: each member bound to its own node, in order", list(GROUP), [group_job("RUNNING")],
     BridgePlan(bind=[Binding(member(0), "20", ("gpu-0",), "node-a"), Binding(member(1), "20", ("gpu-1",), "node-b")])),
    ("running, one bound already: the other bound", [member(0, node_name="node-a"), member(1)], [group_job("RUNNING")],
     BridgePlan(bind=[Binding(member(1), "20", ("gpu-1",), "node-b")])),
    ("running, both bound: nothing", [member(0, node_name="node-a"), member(1, node_name="node-b")],
     [group_job("RUNNING")], BridgePlan()),
    ("a member deleted: the job cancelled, the other member deleted",
     [member(0, node_name="node-a", deleting=True), member(1, node_name="node-b")], [group_job("RUNNING")],
     BridgePlan(cancel=["20"], delete_pods=[member(1, node_name="node-b")])),
    ("a member gone: the same", [member(1, node_name="node-b")], [group_job("RUNNING")],
     BridgePlan(cancel=["20"], delete_pods=[member(1, node_name="node-b")])),
    ("completing, one member still terminating: held", [member(1, node_name="node-b", deleting=True)],
     [group_job("COMPLETING")], BridgePlan()),
    ("completing, every member gone: released on every node", [], [group_job("COMPLETING")],
     BridgePlan(release=[("20", ("gpu-0", "gpu-1"))])),
    ("preempted (ended) while both run: both deleted",
     [member(0, node_name="node-a"), member(1, node_name="node-b")], [group_job("CANCELLED")],
     BridgePlan(delete_pods=[member(0, node_name="node-a"), member(1, node_name="node-b")])),
    ("the survivor of a broken group waits for the group to be whole again", [member(1)], [group_job("CANCELLED")],
     BridgePlan(pending=[(member(1), "pod group train: 1 of 2 pods exist; its Slurm job is asked for once all do")])),
    ("a replaced member: the old job ended, a new one for the new pair",
     [member(0, uid="uid-new"), member(1)], [group_job("CANCELLED")],
     BridgePlan(submit_groups=[PodGroup("inference", "train", (member(0, uid="uid-new"), member(1)))])),
    ("an orphan group job (no member left) waiting: cancelled", [], [group_job("PENDING")], BridgePlan(cancel=["20"])),
    ("a group job on fewer nodes than members: cancelled", list(GROUP), [group_job("RUNNING", nodes=("gpu-0",))],
     BridgePlan(cancel=["20"])),
    ("every member finished, the job ended: nothing more (not a new job for no one)",
     [member(0, node_name="node-a", finished=True), member(1, node_name="node-b", finished=True)],
     [group_job("CANCELLED")], BridgePlan()),
    ("every member finished, the job forgotten by squeue: nothing", [member(0, node_name="node-a", finished=True),
                                                                      member(1, node_name="node-b", finished=True)],
     [], BridgePlan()),
    ("a lone pod and a group side by side", [POD, *GROUP], [],
     BridgePlan(submit=[POD], submit_groups=[PodGroup("inference", "train", GROUP)])),
]


@pytest.mark.parametrize("pods,jobs,expected", [c[1:] for c in GROUP_CASES], ids=[c[0] for c in GROUP_CASES])
def test_group_plan(pods, jobs, expected):
    assert plan_bridge(pods, jobs, NODES) == expected


def test_a_running_group_is_settled_and_its_plan_repeatable():
    pods = [member(0, node_name="node-a"), member(1, node_name="node-b")]
    assert plan_bridge(pods, [group_job("RUNNING")], NODES).empty
    assert plan_bridge(list(reversed(pods)), [group_job("RUNNING")], NODES).empty


@pytest.mark.parametrize("pods,expected", [
    ([member(0, node_name="node-a", finished=True), member(1, node_name="node-b")], BridgePlan()),
    ([member(0, node_name="node-a", finished=True), member(1, node_name="node-b", finished=True)],
     BridgePlan(cancel=["20"])),
    ([member(1, node_name="node-b", finished=True)], BridgePlan(cancel=["20"])),  # one finished, one gone
], ids=["one worker done, the other still runs: left alone", "both done: the job cancelled",
        "one done, one gone: cancelled"])
def test_a_finished_member_leaves_the_others_running(pods, expected):
    assert plan_bridge(pods, [group_job("RUNNING")], NODES) == expected


def test_a_group_whose_members_all_finished_is_released_once_completing():
    pods = [member(0, node_name="node-a", finished=True), member(1, node_name="node-b", finished=True)]
    assert plan_bridge(pods, [group_job("COMPLETING")], NODES) == BridgePlan(release=[("20", ("gpu-0", "gpu-1"))])


def test_a_plan_says_when_placeholders_hold_resources_without_changing_what_is_to_be_done():
    held = plan_bridge([BOUND], [job("RUNNING")], NODES)
    assert held.placeholders_held and held.empty and held == BridgePlan()
    assert plan_bridge([pod(uid="uid-1")], [job("COMPLETING", uid="uid-9")], NODES).placeholders_held
    assert not plan_bridge([pod(pending_message="Slurm job 7 pending: Resources")],
                           [job("PENDING", reason="Resources")], NODES).placeholders_held
