"""The e2e's double-booking sampler (testbed/double_booking.py): what it reads from scontrol and
which moments it calls a violation, so that a sampler that sees nothing wrong is shown able to."""

from __future__ import annotations

import pytest

from testbed.double_booking import DoubleBookingSampler, HeldJob, RunningPod, held_jobs, violations

POD_A = "0f6c4a52-8a3e-4e43-9d2a-6a1a3c2b5d11"
POD_B = "7d1e9c3b-2f4a-4b6c-8e1d-3c5a7b9d0e22"

# Trimmed `scontrol --details show job` of Slurm 24.11, every job, blank lines between them.
JOBS = f"""JobId=12 JobName=wrap
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=h100-0
     Nodes=h100-0 CPU_IDs=0 Mem=256 GRES=gpu:h100:6(IDX:0-5)
   Comment=(null)

JobId=13 JobName=kubeslurm-pod:apps/infer-a
   JobState=COMPLETING Reason=None Dependency=(null)
   NodeList=h100-0
     Nodes=h100-0 CPU_IDs=1 Mem=32 GRES=gpu:h100:2(IDX:6-7)
   Comment=kubeslurm.io/pod-uid={POD_A}

JobId=14 JobName=kubeslurm-pod:apps/infer-b
   JobState=PENDING Reason=Resources Dependency=(null)
   NodeList=
   Comment=kubeslurm.io/pod-uid={POD_B}

JobId=15 JobName=wrap
   JobState=RUNNING Reason=None Dependency=(null)
     Nodes=cpu-0 CPU_IDs=0 Mem=100 GRES=
"""


def test_only_jobs_running_or_completing_with_their_gpus_on_the_node():
    assert held_jobs(JOBS, "h100-0") == [
        HeldJob("12", "RUNNING", "wrap", None, frozenset(range(6))),
        HeldJob("13", "COMPLETING", "kubeslurm-pod:apps/infer-a", POD_A, frozenset({6, 7})),
        HeldJob("15", "RUNNING", "wrap", None, frozenset()),  # elsewhere: nothing of this node
    ]
    assert held_jobs("No jobs in the system\n", "h100-0") == []


def test_a_completing_job_that_no_longer_lists_its_gpus_keeps_those_seen_before():
    seen: dict[str, frozenset[int]] = {}
    held_jobs(JOBS, "h100-0", seen)
    later = "JobId=13 JobName=kubeslurm-pod:apps/infer-a\n   JobState=COMPLETING Reason=None\n" \
            f"   NodeList=h100-0\n   Comment=kubeslurm.io/pod-uid={POD_A}\n"
    (job,) = held_jobs(later, "h100-0", seen)
    assert job.gpus == frozenset({6, 7}) and job.remembered


def _job(job_id, gpus, pod_uid=None, state="RUNNING"):
    return HeldJob(job_id, state, f"kubeslurm-pod:apps/{pod_uid}" if pod_uid else "wrap", pod_uid, frozenset(gpus))


def _pod(uid, gpus):
    return RunningPod({POD_A: "infer-a", POD_B: "infer-b"}[uid], uid, None if gpus is None else frozenset(gpus))


@pytest.mark.parametrize("jobs, pods, expected", [
    # alice's job and a pod with its running placeholder on other GPUs: fine
    ([_job("1", {0, 1, 2, 3, 4, 5}), _job("2", {6, 7}, POD_A)], [_pod(POD_A, {6, 7})], []),
    # a preempted placeholder COMPLETING (held by the Epilog) while its pod still runs: fine
    ([_job("2", {6, 7}, POD_A, "COMPLETING")], [_pod(POD_A, {6, 7})], []),
    # a pod whose GPUs could not be read yet is still checked for its job
    ([_job("2", {6, 7}, POD_A)], [_pod(POD_A, None)], []),
    ([_job("1", {0, 1}), _job("3", {1, 2}, state="COMPLETING")], [], ["GPU 1 held by job 1"]),
    ([], [_pod(POD_A, {6, 7})], ["pod infer-a GPUs [6, 7] runs without its placeholder job"]),
    ([_job("2", {6, 7}, POD_A), _job("4", {0, 1, 2, 3, 4, 5, 6, 7})], [_pod(POD_A, {6, 7})],
     ["GPU 6 held by job 2", "GPU 7 held by job 2", "GPU [6, 7] of pod infer-a GPUs [6, 7] also held by job 4"]),
    ([_job("2", {6, 7}, POD_A)], [_pod(POD_A, {5, 6})],
     ["pod infer-a GPUs [5, 6] has other GPUs than its job 2"]),
    ([_job("2", {6, 7}, POD_A), _job("3", {4, 5}, POD_B)], [_pod(POD_A, {6, 7}), _pod(POD_B, {6, 7})],
     ["has other GPUs than its job 3", "GPU [6, 7] of pod infer-b GPUs [6, 7] also held by job 2",
      "held by pod infer-a GPUs [6, 7] and pod infer-b"]),
])
def test_violations(jobs, pods, expected):
    found = violations(jobs, pods)
    assert len(found) == len(expected), found
    for text, wanted in zip(found, expected):
        assert wanted in text, (text, wanted)


def _pod_object(uid, name, phase="Running", node="node-a"):
    return {"metadata": {"uid": uid, "name": name}, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_a_pod_counts_once_it_was_running_in_two_listings_in_a_row():
    """Jobs are read first: a pod started between the reads, on GPUs a job released meanwhile,
    is no overlap; one running before and after the jobs' read is."""
    alice = "JobId=12 JobName=wrap\n   JobState=RUNNING Reason=None\n     Nodes=h100-0 CPU_IDs=0 Mem=256 GRES=gpu:h100:8(IDX:0-7)\n"
    listings = iter([[_pod_object(POD_A, "infer-a")], [_pod_object(POD_A, "infer-a")]])
    sampler = DoubleBookingSampler(lambda: alice, lambda: next(listings), lambda pod: {6, 7}, "h100-0", "node-a")
    sampler.sample_once()
    assert sampler.violation_count == 0 and sampler.samples == 1
    sampler.sample_once()
    assert [v.what for v in sampler.found] == [
        "pod infer-a GPUs [6, 7] runs without its placeholder job RUNNING or COMPLETING",
        "GPU [6, 7] of pod infer-a GPUs [6, 7] also held by job 12 wrap RUNNING GPUs [0, 1, 2, 3, 4, 5, 6, 7]"]
    assert "job 12 wrap RUNNING" in sampler.found[0].seen and sampler.pods_seen_running == {"infer-a"}


def test_pods_elsewhere_or_not_running_are_not_holders():
    listing = [_pod_object(POD_A, "infer-a", node="node-b"), _pod_object(POD_B, "infer-b", phase="Pending")]
    sampler = DoubleBookingSampler(lambda: "", lambda: listing, lambda pod: {0}, "h100-0", "node-a")
    sampler.sample_once()
    sampler.sample_once()
    assert sampler.violation_count == 0 and sampler.pods_seen_running == set()


def test_a_pod_running_on_its_completing_placeholder_is_the_window_it_watches():
    completing = (f"JobId=13 JobName=kubeslurm-pod:apps/infer-a\n   JobState=COMPLETING Reason=None\n"
                  f"     Nodes=h100-0 CPU_IDs=1 Mem=32 GRES=gpu:h100:2(IDX:6-7)\n   Comment=kubeslurm.io/pod-uid={POD_A}\n")
    sampler = DoubleBookingSampler(lambda: completing, lambda: [_pod_object(POD_A, "infer-a")], lambda pod: {6, 7},
                                   "h100-0", "node-a")
    sampler.sample_once()
    sampler.sample_once()
    assert sampler.violation_count == 0 and sampler.pods_seen_held_by_epilog == {"infer-a"}
    assert sampler.completing_gpus_listed == 2 and sampler.completing_gpus_remembered == 0
