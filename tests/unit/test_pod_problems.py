"""Why pods do not run, as one message for the Ready condition: the scheduler's and kubelet's own words."""

import pytest

from kubeslurm.reconcile.pod_problems import MAX_MESSAGE, pod_problem, pod_problems

UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."


def pod(name="h100-1", phase="Pending", node=None, conditions=(), containers=(), init_containers=()):
    spec = {"nodeName": node} if node else {}
    status = {"phase": phase, "conditions": list(conditions), "containerStatuses": list(containers)}
    if init_containers:
        status["initContainerStatuses"] = list(init_containers)
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def waiting(name, reason, message="", last_exit=None):
    state = {"name": name, "state": {"waiting": {"reason": reason, **({"message": message} if message else {})}}}
    if last_exit is not None:
        state["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
    return state


UNSCHEDULED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}


@pytest.mark.parametrize(("the_pod", "problem"), [
    (pod(conditions=[UNSCHEDULED]), f"Pending: {UNSCHEDULABLE}"),
    (pod(), "Pending: not scheduled yet"),  # no scheduler has looked at it (or none runs)
    (pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]), "Pending: SchedulerError"),
    # scheduled, its image being pulled: that fixes itself
    (pod(node="k1", containers=[waiting("slurmd", "ContainerCreating")]), None),
    (pod(node="k1", containers=[waiting("slurmd", "ImagePullBackOff", 'Back-off pulling image "localhost/x:1"')]),
     'container slurmd ImagePullBackOff: Back-off pulling image "localhost/x:1"'),
    (pod(phase="Running", node="k1", containers=[waiting("slurmd", "CrashLoopBackOff", "back-off 5m0s", last_exit=1)]),
     "container slurmd CrashLoopBackOff (last exit code 1, Error)"),
    (pod(node="k1", init_containers=[waiting("setup", "CreateContainerConfigError", 'secret "x" not found')]),
     'container setup CreateContainerConfigError: secret "x" not found'),
    (pod(phase="Running", node="k1", containers=[{"name": "slurmd", "state": {"running": {}}}]), None),
])
def test_the_problem_of_one_pod(the_pod, problem):
    assert pod_problem(the_pod) == problem


def test_pods_with_the_same_problem_are_named_together_in_name_order():
    pods = [pod("h100-2", conditions=[UNSCHEDULED]), pod("h100-0", phase="Running", node="k1"),
            pod("h100-1", conditions=[UNSCHEDULED]),
            pod("h100-3", node="k2", containers=[waiting("slurmd", "ErrImagePull", "not found")])]
    assert pod_problems(pods) == (
        f"h100-1, h100-2 Pending: {UNSCHEDULABLE}; h100-3 container slurmd ErrImagePull: not found")
    assert pod_problems([pod("h100-0", phase="Running", node="k1")]) == ""


def test_a_long_message_is_cut_and_its_white_space_folded():
    long = "reason\n" + "x" * 1000
    (problem,) = [pod_problem(pod(conditions=[{**UNSCHEDULED, "message": long}]))]
    assert len(problem) == len("Pending: ") + MAX_MESSAGE and problem.endswith("...") and "\n" not in problem
