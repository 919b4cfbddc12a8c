"""Slurm's scheduling policies under the configs kubeslurm renders, each shown by a job pattern.

One cluster for the module, rendered from a SlurmCluster written the way a site would ask
for these policies: partition-priority preemption (a `high` partition over the same
nodes as `low`), fair-share between two accounts of equal shares, and an `interns`
account with limits (maxGPUs, maxRunningJobs, maxJobTime). Two 2-CPU `cpu` nodes and one
2-GPU `gpu` node. spec.slurmConf tunes what a site tunes to see fair-share at work in
minutes instead of hours (PriorityCalcPeriod=1, no age factor).

The tests share the cluster and run in file order; each leaves it idle.
"""

from __future__ import annotations

import re

import pytest

from kubeslurm.render.config.accounting_commands import accounting_commands
from testbed.native_slurm.rendered import load, native_cluster, slurm_control
from testbed.waiting import wait_for

pytestmark = pytest.mark.slurm

CLUSTER = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
    "metadata": {"name": "policies", "namespace": "hpc"},
    "spec": {
        "accounting": {"enabled": True},
        "scheduling": {"backfill": True, "fairShare": {"enabled": True}, "preemption": "partition"},
        "accounts": [
            {"name": "vision", "shares": 50, "users": ["alice"]},
            {"name": "nlp", "shares": 50, "users": ["bob"]},
            {"name": "interns", "shares": 10, "users": ["carol"],
             "limits": {"maxGPUs": 1, "maxRunningJobs": 1, "maxJobTime": "00:01:00"}},
        ],
        "partitions": [
            {"name": "low", "nodeSets": ["cpu"], "default": True, "priorityTier": 1},
            {"name": "high", "nodeSets": ["cpu"], "priorityTier": 10},
            {"name": "gpu", "nodeSets": ["gpu"]},
        ],
        "slurmConf": {"PriorityCalcPeriod": "1", "PriorityWeightAge": "0", "SchedulerParameters": "bf_interval=1"},
    },
}
NODE_SETS = [
    {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": name, "namespace": "hpc"},
     "spec": {"clusterName": "policies", "replicas": replicas, "resources": {"cpu": "2", "memory": "2Gi"}, **extra}}
    for name, replicas, extra in (("cpu", 2, {}), ("gpu", 1, {"gpus": {"count": 2, "type": "a100"}}))
]


class Policies:
    def __init__(self, cluster):
        self.c = cluster

    def sh(self, cmd: str, user: str = "alice", check: bool = True):
        return self.c.run("login", cmd, user=user, check=check, timeout=60)

    def sbatch(self, args: str, user: str = "alice") -> str:
        return self.sh(f"sbatch --parsable -o /dev/null {args}", user=user).stdout.strip().split(";")[0]

    def field(self, job: str, key: str) -> str:
        out = self.c.run(self.c.controller, f"scontrol -o show job {job}", check=False).stdout
        match = re.search(rf"\b{key}=(\S*)", out)
        return match.group(1) if match else ""

    def sacct(self, job: str, fields: str, all_steps: bool = False) -> list[str]:
        flags = "-n -P" + ("" if all_steps else " -X")
        out = self.c.run(self.c.controller, f"sacct {flags} -j {job} -o {fields}").stdout
        return [line for line in out.split("\n") if line]

    def wait(self, ok, timeout: float, what: str):
        return wait_for(ok, timeout, what)

    def wait_state(self, job: str, state: str, timeout: float = 60) -> None:
        self.wait(lambda: self.field(job, "JobState") == state, timeout,
                  f"job {job} {state} (is {self.field(job, 'JobState')}, reason {self.field(job, 'Reason')})")

    def wait_sacct(self, job: str, state: str, timeout: float = 120) -> None:
        # "CANCELLED by <uid>" is CANCELLED
        self.wait(lambda: [s.split()[0] for s in self.sacct(job, "State")] == [state], timeout,
                  f"sacct: job {job} {state} (is {self.sacct(job, 'State')})")

    def wait_reason(self, job: str, reason: str, timeout: float = 30) -> None:
        self.wait(lambda: self.field(job, "Reason") == reason, timeout,
                  f"job {job} pending for {reason} (is {self.field(job, 'JobState')}/{self.field(job, 'Reason')})")

    def idle(self, nodes: list[str]) -> bool:
        out = self.c.run(self.c.controller, f"sinfo -h -N -n {','.join(nodes)} -o '%N %t'").stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        return all(states.get(n) == "idle" for n in nodes)

    def fair_share(self, account: str, user: str) -> float:
        """The user's fair-share factor in the account (Fair Tree ranks users: 1 is first in line)."""
        out = self.c.run(self.c.controller, "sshare -a -n -P -o Account,User,FairShare").stdout
        match = re.search(rf"^\s*{account}\|{user}\|([0-9.]+)$", out, re.M)
        assert match, out
        return float(match.group(1))


@pytest.fixture(scope="module")
def policies(slurm_rootfs, request):
    model, node_sets = load([CLUSTER, *NODE_SETS])
    cluster = native_cluster(slurm_rootfs, model, node_sets, name="policies")
    failed_before = request.session.testsfailed
    try:
        cluster.start()
        slurm_control(cluster).sacctmgr(accounting_commands(model))
        p = Policies(cluster)
        # --time is enforced: started now, checked by the last test, so the wait overlaps the others.
        p.over_time = p.sbatch("-p gpu --time=1 --wrap 'sleep 600'", user="bob")
        yield p
    finally:
        if request.session.testsfailed > failed_before:
            for daemon in cluster.daemons:
                print(f"\n===== {daemon} (last 40 lines) =====\n{cluster.logs(daemon, 40)}")
        cluster.stop()


def test_a_high_priority_partition_job_requeues_a_running_low_one_which_completes_later(policies):
    p = policies
    low = p.sbatch("-p low -N2 --exclusive --wrap 'sleep 20'")
    p.wait_state(low, "RUNNING")
    high = p.sbatch("-p high -N1 --wrap 'sleep 2'", user="bob")
    p.wait_sacct(high, "COMPLETED", timeout=60)
    # preempted with PreemptMode=REQUEUE: back in the queue, and its second run completes
    p.wait(lambda: int(p.field(low, "Restarts") or 0) >= 1, 30, f"job {low} requeued")
    p.wait_sacct(low, "COMPLETED", timeout=240)
    assert p.sacct(low, "State", all_steps=False) == ["COMPLETED"]


def test_fair_share_starts_the_account_that_used_less_first(policies):
    p = policies
    used = p.sbatch("-p low -N2 --exclusive --wrap 'sleep 20'")
    p.wait_sacct(used, "COMPLETED", timeout=60)
    # (nlp used a little too: bob's job of the preemption test) Usage is folded in every PriorityCalcPeriod.
    p.wait(lambda: p.fair_share("vision", "alice") < p.fair_share("nlp", "bob"), 150,
           f"alice's fair-share factor below bob's: {p.fair_share('vision', 'alice')} vs {p.fair_share('nlp', 'bob')}")
    blocker = p.sbatch("-p low -N2 --exclusive --wrap 'sleep 10'", user="bob")
    p.wait_state(blocker, "RUNNING")
    first_asked = p.sbatch("-p low -N2 --exclusive --wrap 'sleep 1'")  # alice, vision: has used the cluster
    later = p.sbatch("-p low -N2 --exclusive --wrap 'sleep 1'", user="bob")  # bob, nlp: used less
    assert int(p.field(later, "Priority")) > int(p.field(first_asked, "Priority"))
    for job in (first_asked, later):
        p.wait_sacct(job, "COMPLETED", timeout=120)
    [later_start], [first_start] = p.sacct(later, "Start"), p.sacct(first_asked, "Start")
    assert later_start < first_start, (later_start, first_start)  # ISO times sort as text


def test_account_limits_from_the_spec_hold_jobs_with_slurm_s_reason(policies):
    p = policies
    gpus = p.sbatch("-p gpu --gres=gpu:2 --time=1 --wrap true", user="carol")
    p.wait_reason(gpus, "AssocGrpGRES")
    too_long = p.sh("sbatch --parsable -o /dev/null -p low --time=5 --wrap true", user="carol", check=False)
    if too_long.returncode == 0:  # accepted, but never started
        p.wait_reason(too_long.stdout.strip(), "AssocMaxWallDurationPerJobLimit")
    else:
        assert "time limit" in too_long.stderr.lower(), too_long.stderr
    running = p.sbatch("-p low --time=1 --wrap 'sleep 10'", user="carol")
    p.wait_state(running, "RUNNING")
    second = p.sbatch("-p low --time=1 --wrap true", user="carol")
    p.wait_reason(second, "AssocGrpJobsLimit")
    p.wait_sacct(second, "COMPLETED", timeout=90)  # starts once the first has ended
    p.sh(f"scancel {gpus} {too_long.stdout.strip() if too_long.returncode == 0 else ''}", user="carol")


def test_arrays_and_dependencies_run_as_asked(policies):
    p = policies
    array = p.sbatch("-p low --array=1-4 --wrap 'test $SLURM_ARRAY_TASK_ID -le 4'")
    failing = p.sbatch("-p low --wrap 'exit 3'")
    after_ok = p.sbatch(f"-p low --dependency=afterok:{failing} --wrap true")
    after_any = p.sbatch(f"-p low --dependency=afterany:{failing} --wrap true")
    p.wait_sacct(after_any, "COMPLETED", timeout=90)
    assert p.sacct(failing, "State,ExitCode") == ["FAILED|3:0"]
    p.wait_reason(after_ok, "DependencyNeverSatisfied")
    p.sh(f"scancel {after_ok}")
    p.wait(lambda: sorted(p.sacct(array, "JobID,State")) == [f"{array}_{i}|COMPLETED" for i in range(1, 5)], 90,
           f"every task of array {array} COMPLETED (is {p.sacct(array, 'JobID,State')})")


def test_scancel_of_a_running_multi_node_job_frees_every_node(policies):
    p = policies
    job = p.sbatch("-p low -N2 --wrap 'srun sleep 300'")
    p.wait_state(job, "RUNNING")
    p.sh(f"scancel {job}")
    p.wait_sacct(job, "CANCELLED", timeout=60)
    p.wait(lambda: p.idle(["cpu-0", "cpu-1"]), 60, "cpu-0 and cpu-1 idle after scancel")


def test_a_job_is_killed_at_its_time_limit(policies):
    p = policies
    p.wait_sacct(p.over_time, "TIMEOUT", timeout=240)
    elapsed = p.sacct(p.over_time, "ElapsedRaw")[0]
    assert 60 <= int(elapsed) < 200, elapsed
