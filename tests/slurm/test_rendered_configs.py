"""The operator's rendered configs and its Slurm code path, run by real Slurm 24.11.

One cluster for the whole module, started from nothing but what kubeslurm renders
for the contract manifest (examples/research.yaml, h100 scaled to 3 replicas):
slurm.conf, gres.conf, cgroup.conf, topology.conf, slurmdbd.conf, the slurmd
`--conf` line of each NodeSet, and the accounts applied with the operator's own
`SlurmControl.sacctmgr(accounting_commands(cluster))`. The h100 pods register 8
CPUs, 31 GiB and 8 (fake) GPUs on this small machine because slurm.conf has
SlurmdParameters=config_overrides, exactly as a pod's limits do in Kubernetes.

The fixture also runs `scontrol reconfigure` once every node has registered: with
topology.conf, Slurm 24.11 knows a dynamic node's switch only if the node existed
when slurmctld last read the file (see test_topology_conf_from_placements_is_accepted).

The tests share the cluster and run in file order; the scale-down and reconfigure
tests, which change the cluster, come last.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kubeslurm.api import parse_object
from kubeslurm.metrics.cluster_collector import ClusterStateCollector
from kubeslurm.metrics.sdiag import KNOWN
from kubeslurm.metrics.slurm_state import NODE_STATES, slurm_state_samples
from kubeslurm.reconcile.lost_slurmd import lost_slurmd_actions
from kubeslurm.reconcile.run_state import Run
from kubeslurm.reconcile.scale_down import plan_scale
from kubeslurm.reconcile.slurm_control import SlurmControl
from kubeslurm.reconcile.slurm_hostlist import expand
from kubeslurm.reconcile.slurm_sync import _apply_accounts, accounts_hash
from kubeslurm.render.config.accounting_commands import accounting_commands
from kubeslurm.render.config.files import render_config_files
from kubeslurm.render.k8s import naming
from kubeslurm.render.slurmd.node import slurmd_conf_line
from kubeslurm.render.slurmd.statefulset import RESTART_MARKER, SLURMD_START
from testbed.native_slurm import NativeSlurmCluster
from testbed.native_slurm.rendered import load, native_cluster, read_documents
from testbed.waiting import wait_for
from tests.slurm.conftest import stopped_after

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "research"
H100 = ["h100-0", "h100-1", "h100-2"]
CPU = ["cpu-0"]
LOGIN = "login"
# Where each slurmd pod "runs": the Kubernetes node labels topology.conf is built from.
PLACEMENTS = {"h100-0": {"zone": "a"}, "h100-1": {"zone": "a"},
              "h100-2": {"zone": "b"}, "cpu-0": {"zone": "b"}}


def contract_documents() -> list[dict]:
    """examples/research.yaml with what this tier needs on top: 3 h100 pods, a topology,
    and a backfill interval of 1 s (set the way a user tunes Slurm: spec.slurmConf)."""
    docs = read_documents(REPO / "examples/research.yaml")
    cluster = next(d for d in docs if d["kind"] == "SlurmCluster")
    cluster["spec"]["topology"] = {"plugin": "tree", "nodeLabels": ["zone"]}
    cluster["spec"]["slurmConf"] = {"SchedulerParameters": "bf_interval=1"}
    h100 = next(d for d in docs if d["kind"] == "NodeSet" and d["metadata"]["name"] == "h100")
    h100["spec"]["replicas"] = 3
    return docs


class Env:
    """What the tests share: the running cluster, the models, the operator's SlurmControl."""

    def __init__(self, cluster: NativeSlurmCluster, model, node_sets, configs):
        self.c = cluster
        self.model = model
        self.node_sets = node_sets
        self.configs = configs
        self.ctld = cluster.controller
        self.ctl = SlurmControl(self.run_in_controller)

    def run_in_controller(self, argv, timeout=60) -> subprocess.CompletedProcess:
        return self.c.run(self.ctld, list(argv), timeout=timeout, check=False)

    def sh(self, cmd: str, user: str = "alice", host: str = LOGIN, check: bool = True,
           timeout: float = 60) -> subprocess.CompletedProcess:
        return self.c.run(host, cmd, user=user, check=check, timeout=timeout)

    def sbatch(self, args: str, user: str = "alice") -> str:
        out = self.sh(f"sbatch --parsable {args}", user=user).stdout.strip()
        return out.split(";")[0]

    def job_field(self, job: str, key: str) -> str:
        out = self.c.run(self.ctld, f"scontrol -o show job {job}", check=False).stdout
        m = re.search(rf"\b{key}=(\S*)", out)
        return m.group(1) if m else ""

    def wait_for(self, ok, timeout: float, what: str):
        return wait_for(ok, timeout, what)

    def wait_state(self, job: str, state: str, timeout: float = 30) -> None:
        self.wait_for(lambda: self.job_field(job, "JobState") == state, timeout,
                      f"job {job} to be {state} (is {self.job_field(job, 'JobState')!r})")

    def sacct(self, job: str, fields: str) -> str:
        return self.c.run(self.ctld, f"sacct -n -P -X -j {job} -o {fields}").stdout.strip()

    def wait_sacct_state(self, job: str, state: str, timeout: float = 60) -> None:
        self.wait_for(lambda: self.sacct(job, "State") == state, timeout,
                      f"sacct to record job {job} as {state}")

    def nodes(self) -> dict:
        return {n.name: n for n in self.ctl.nodes()}

    def show_node(self, name: str) -> dict[str, str]:
        line = self.c.run(self.ctld, f"scontrol -o show node {name}").stdout.strip()
        return dict(re.findall(r"(\w+)=(\S*)", line))


@pytest.fixture(scope="module")
def env(slurm_rootfs, request):
    t0 = time.monotonic()
    model, node_sets = load(contract_documents())
    # carol has no account: Slurm must refuse her jobs.
    cluster = native_cluster(slurm_rootfs, model, node_sets, placements=PLACEMENTS,
                             extra_users=["carol"], name="rendered")
    configs = cluster.configs
    assert "topology.conf" in configs
    assert "slurmdbd.conf" in configs
    assert [n.name for n in cluster.nodes] == H100 + CPU
    assert list(cluster.users) == ["alice", "bob", "carol"]
    assert cluster.controller == naming.controller_hosts(CLUSTER, backup=False)[0].name
    with stopped_after(cluster, request):
        cluster.start()
        e = Env(cluster, model, node_sets, configs)
        # The operator's own step: accounts from spec.accounts, through SlurmControl.
        e.ctl.sacctmgr(accounting_commands(model))
        # Slurm 24.11 resolves topology.conf's node names only when it reads the file:
        # at slurmctld's start no dynamic node exists yet, so every switch is empty
        # and a multi-node job is refused until a reconfigure after registration.
        e.topology_at_start = cluster.run(e.ctld, "scontrol show topology").stdout
        e.two_nodes_at_start = e.sh("srun -A vision -N2 hostname", check=False)
        e.ctl.reconfigure()
        e.wait_for(e.ctl.ping, 30, "slurmctld after reconfigure")
        print(f"\ncluster up and accounts applied in {time.monotonic() - t0:.1f}s:",
              {k: round(v, 1) for k, v in cluster.timings.items()})
        yield e


# ---------------------------------------------------------------- 1. registration

def test_nodes_register_what_slurmd_conf_line_rendered(env):
    expected = {"h100": slurmd_conf_line(env.node_sets["h100"]),
                "cpu": slurmd_conf_line(env.node_sets["cpu"])}
    assert expected["h100"] == "CPUs=8 RealMemory=31129 Features=h100,nvlink Gres=gpu:h100:8"
    for name in H100 + CPU:
        conf = dict(kv.split("=", 1) for kv in expected[name.split("-")[0]].split())
        node = env.show_node(name)
        assert node["CPUTot"] == conf["CPUs"], node
        assert node["RealMemory"] == conf["RealMemory"], node
        assert node["AvailableFeatures"] == conf["Features"], node
        assert node["ActiveFeatures"] == conf["Features"], node
        assert node["Gres"] == conf.get("Gres", "(null)"), node
        assert node["State"] == "IDLE+DYNAMIC_NORM", node

    parsed = env.nodes()
    assert sorted(parsed) == sorted(H100 + CPU)
    for name in H100:
        n = parsed[name]
        assert (n.gpus, n.features, n.base_state, n.drained) == (8, ["h100", "nvlink"], "IDLE", False), n
    assert (parsed["cpu-0"].gpus, parsed["cpu-0"].features, parsed["cpu-0"].base_state) == (0, ["cpu"], "IDLE")


# ---------------------------------------------------------------- 2. partitions

def test_partitions_are_the_node_sets(env):
    def nodes_of(partition):
        return sorted(env.sh(f"sinfo -h -N -p {partition} -o %N").stdout.split())
    assert nodes_of("gpu") == H100
    assert nodes_of("cpu") == CPU
    summary = env.sh("sinfo -h -o '%P %l'").stdout.split("\n")
    assert "gpu* 1-00:00:00" in summary, summary  # '*': the default partition
    gpu = env.c.run(env.ctld, "scontrol -o show partition gpu").stdout
    assert "Default=YES" in gpu and "MaxTime=1-00:00:00" in gpu and "NodeSets=h100" in gpu, gpu
    cpu = env.c.run(env.ctld, "scontrol -o show partition cpu").stdout
    assert "Default=NO" in cpu and "NodeSets=cpu" in cpu, cpu


# ---------------------------------------------------------------- topology

def test_topology_conf_from_placements_is_accepted(env):
    assert env.configs["topology.conf"].split("\n")[2:5] == [
        "SwitchName=s-a Nodes=h100-0,h100-1",
        "SwitchName=s-b Nodes=cpu-0,h100-2",
        "SwitchName=s-root Switches=s-a,s-b",
    ]
    # Before the reconfigure (made by the fixture once the nodes had registered) the
    # root switch reached no node, and Slurm refused any job spanning two nodes.
    assert re.search(r"SwitchName=s-root .*Nodes= ", env.topology_at_start), env.topology_at_start
    assert env.two_nodes_at_start.returncode != 0
    assert "Requested topology configuration is not available" in env.two_nodes_at_start.stderr

    out = env.c.run(env.ctld, "scontrol show topology").stdout
    switches = {m.group(1): m.group(2) for m in re.finditer(r"SwitchName=(\S+) .*?Nodes=(\S*)", out)}
    for hostlist in switches.values():  # the operator's own expansion agrees with Slurm's
        assert expand(hostlist) == env.ctl.expand_hostlist(hostlist), hostlist
    expand_ = env.ctl.expand_hostlist
    assert sorted(switches) == ["s-a", "s-b", "s-root"], out
    assert sorted(expand_(switches["s-a"])) == ["h100-0", "h100-1"], out
    assert sorted(expand_(switches["s-b"])) == ["cpu-0", "h100-2"], out
    assert sorted(expand_(switches["s-root"])) == sorted(H100 + CPU), out
    # Placement follows the switches: two h100 nodes under one switch are h100-0 and h100-1.
    hosts = env.sh("srun -A vision -N2 --switches=1 hostname").stdout.split()
    assert sorted(hosts) == ["h100-0", "h100-1"], hosts


# ---------------------------------------------------------------- 3. jobs and GPUs

def test_sbatch_and_srun_run_as_alice_with_account_vision(env):
    out = env.sh("srun -A vision -p gpu bash -c 'id -un; hostname'").stdout.split()
    assert out[0] == "alice" and out[1] in H100, out

    job = env.sbatch("-A vision -o /tmp/whoami-%j.out --wrap 'id -un; hostname'")
    assert env.c.wait_job(job, 60) == "COMPLETED"
    assert env.job_field(job, "Account") == "vision"
    host = env.job_field(job, "NodeList")
    assert host in H100  # gpu is the default partition
    assert env.c.run(host, f"cat /tmp/whoami-{job}.out").stdout.split() == ["alice", host]


def test_gres_gives_exactly_the_requested_gpus(env):
    two = env.sh("srun -A vision --gres=gpu:2 printenv CUDA_VISIBLE_DEVICES").stdout.strip()
    assert len(set(two.split(","))) == 2 == len(two.split(",")), two
    eight = env.sh("srun -A vision --gres=gpu:h100:8 printenv CUDA_VISIBLE_DEVICES").stdout.strip()
    assert sorted(eight.split(","), key=int) == [str(i) for i in range(8)], eight


# ---------------------------------------------------------------- 4. gang start

def test_two_node_job_starts_on_both_nodes_at_once(env):
    out = env.sh("srun -A vision -N2 -l bash -c 'echo $(hostname) $(date +%s.%N)'").stdout
    rows = [line.split(": ", 1)[1].split() for line in out.strip().splitlines()]
    hosts = sorted(r[0] for r in rows)
    assert len(hosts) == 2 and len(set(hosts)) == 2 and set(hosts) <= set(H100), out
    starts = [float(r[1]) for r in rows]
    assert max(starts) - min(starts) < 1.0, out


# ---------------------------------------------------------------- MPI across nodes

# Every rank adds its rank + 1: with n ranks each must print n(n+1)/2.
ALLREDUCE = (
    "from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "print(f'rank={c.rank} size={c.size} host={MPI.Get_processor_name()} sum={c.allreduce(c.rank + 1)}', flush=True)"
)


def test_an_mpi_program_runs_across_two_nodes_with_the_default_pmix(env):
    """MpiDefault=pmix: srun starts Open MPI ranks on two nodes with no --mpi and no mpirun;
    they find each other through Slurm's PMIx server and reduce across the network."""
    assert env.show_node("h100-0")  # the cluster is up
    out = env.sh(f'srun -A vision -N2 -n4 --ntasks-per-node=2 python3 -c "{ALLREDUCE}"', timeout=120).stdout
    ranks = sorted(re.findall(r"^rank=(\d) size=4 host=(\S+) sum=10$", out, re.M))
    assert [r for r, _ in ranks] == ["0", "1", "2", "3"], out
    assert len({host for _, host in ranks}) == 2, out
    # the same from a batch script, and with --mpi=pmix spelled out
    # (the script on sbatch's stdin: a quoted here-document passes it through the shell untouched)
    script = f"#!/bin/bash\nsrun --mpi=pmix python3 -c \"{ALLREDUCE}\"\n"
    job = env.sbatch(f"-A vision -N2 --ntasks-per-node=2 -o /dev/null <<'SCRIPT'\n{script}SCRIPT")
    env.wait_sacct_state(job, "COMPLETED", timeout=120)
    # --exclusive: the job holds the whole node (its 8 CPUs), not the one CPU its task asks for
    exclusive = env.sbatch("-A vision -p gpu -N1 -n1 --exclusive -o /dev/null --wrap true")
    shared = env.sbatch("-A vision -p gpu -N1 -n1 -o /dev/null --wrap true")
    for job in (exclusive, shared):
        env.wait_sacct_state(job, "COMPLETED", timeout=60)
    assert (env.sacct(exclusive, "AllocCPUS"), env.sacct(shared, "AllocCPUS")) == ("8", "1")


# ---------------------------------------------------------------- 5. accounts

def test_accounts_and_shares_come_from_the_cluster_spec(env):
    rows = [r.split("|") for r in env.c.run(
        env.ctld, "sshare -a -n -P -o Account,User,RawShares").stdout.split()]
    shares = {(a.strip(), u): s for a, u, s in rows}
    assert shares[("vision", "")] == "60", rows
    assert shares[("nlp", "")] == "40", rows
    assert ("vision", "alice") in shares and ("nlp", "bob") in shares, rows

    assoc = env.c.run(env.ctld, f"sacctmgr -n -P show assoc cluster={CLUSTER}"
                                " format=Account,User,GrpTRES").stdout.split()
    assert "nlp||gres/gpu=16" in assoc, assoc
    assert "vision||" in assoc, assoc

    # The operator re-applies the list on every reconcile: it must stay harmless.
    env.ctl.sacctmgr(accounting_commands(env.model))
    again = env.c.run(env.ctld, "sshare -a -n -P -o Account,User,RawShares").stdout.split()
    assert sorted(again) == sorted("|".join(r) for r in rows)

    refused = env.sh("sbatch --wrap true", user="carol", check=False)
    assert refused.returncode != 0
    assert "Invalid account" in refused.stderr, refused.stderr
    bob = env.sbatch("-o /dev/null --wrap true", user="bob")
    assert env.c.wait_job(bob, 60) == "COMPLETED"
    assert env.job_field(bob, "Account") == "nlp"  # bob's default account


def test_no_job_runs_as_root_or_as_another_user(env):
    """DisableRootJobs=YES: root's own submission is refused; alice cannot submit as bob."""
    # root with an association of its own, so that only DisableRootJobs can refuse it
    env.ctl.sacctmgr([["add", "user", "root", "account=vision"]])
    try:
        as_root = env.sh("sbatch -A vision -p cpu --wrap true", user=None, check=False)
    finally:
        env.ctl.sacctmgr([["delete", "user", "root", "account=vision"]])
    assert as_root.returncode != 0, as_root.stdout
    print("\nroot's sbatch:", as_root.stderr.strip())
    assert "Invalid user id" in as_root.stderr, as_root.stderr
    assert "for user root disabled" in env.c.logs("slurmctld", 50)  # DisableRootJobs said no
    as_bob = env.sh("sbatch -A nlp -p cpu --uid=bob --wrap true", check=False)
    assert as_bob.returncode != 0, as_bob.stdout
    assert "--uid only permitted by root" in as_bob.stderr, as_bob.stderr


class _Events:
    def __init__(self):
        self.seen = []

    def normal(self, obj, reason, message):
        self.seen.append((reason, message))

    warning = normal


def _sync_accounts(env, accounts: list[dict], status: dict):
    """The operator's own accounts step (slurm_sync._apply_accounts) for spec.accounts = ACCOUNTS,
    run through SlurmControl against this cluster; returns (the status it leaves, the run, events)."""
    document = env.model.model_dump(by_alias=True, exclude_none=True, mode="json")
    document["spec"]["accounts"] = accounts
    model = parse_object(document)
    run = Run(raw={"metadata": document["metadata"], "status": status}, cluster=model, slurm=env.ctl)
    events = _Events()
    _apply_accounts(events, run, status)
    after = {"appliedAccountsHash": accounts_hash(model),
             "appliedAccounts": [{"name": a, "users": u} for a, u in run.applied_accounts.items()]}
    return after, run, events


def test_a_user_removed_from_the_spec_loses_its_association_once_its_jobs_end(env):
    """carol gets accounts from the spec, then leaves it while a job of hers runs: her
    associations go only after the job ended (the job is never touched), then Slurm refuses
    her jobs; the account only she had goes too; her job records stay in sacct."""
    spec = [a.model_dump(by_alias=True, exclude_none=True, mode="json") for a in env.model.spec.accounts]
    status = {"appliedAccountsHash": accounts_hash(env.model),
              "appliedAccounts": [{"name": a["name"], "users": a.get("users", [])} for a in spec]}
    with_carol = [{**a, "users": [*a.get("users", []), "carol"]} if a["name"] == "vision" else a for a in spec]
    with_carol.append({"name": "interns", "users": ["carol"]})
    status, _, _ = _sync_accounts(env, with_carol, status)
    assert {"name": "interns", "users": ["carol"]} in status["appliedAccounts"]
    job = env.sbatch("-A interns -p cpu -o /dev/null --wrap 'sleep 8'", user="carol")
    env.wait_state(job, "RUNNING")

    status, run, _ = _sync_accounts(env, spec, status)  # carol and interns leave the spec
    assert env.job_field(job, "JobState") == "RUNNING"
    assert {"name": "interns", "users": ["carol"]} in status["appliedAccounts"], status
    assert any("carol" in waiting for waiting in run.progressing), run.progressing

    assert env.c.wait_job(job, 60) == "COMPLETED"
    status, run, events = _sync_accounts(env, spec, status)
    assert run.progressing == []
    assert status["appliedAccounts"] == [{"name": a["name"], "users": a.get("users", [])} for a in spec]
    assert [reason for reason, _ in events.seen] == ["AssociationsRemoved"], events.seen
    assoc = env.c.run(env.ctld, f"sacctmgr -n -P show assoc where cluster={CLUSTER} format=Account,User").stdout.split()
    assert not [line for line in assoc if line.endswith("|carol") or line.startswith("interns|")], assoc
    assert "vision|alice" in assoc and "nlp|bob" in assoc, assoc
    refused = env.sh("sbatch -p cpu --wrap true", user="carol", check=False)
    assert refused.returncode != 0 and "Invalid account" in refused.stderr, refused.stderr
    assert env.sacct(job, "User,Account,State") == "carol|interns|COMPLETED"

    # Nothing changed: the step runs no sacctmgr at all.
    calls = []
    quiet = SlurmControl(lambda argv, timeout=60: calls.append(argv) or env.run_in_controller(argv, timeout))
    document = env.model.model_dump(by_alias=True, exclude_none=True, mode="json")
    run = Run(raw={"metadata": document["metadata"], "status": status}, cluster=env.model, slurm=quiet)
    _apply_accounts(_Events(), run, status)
    assert calls == []


# ---------------------------------------------------------------- 6. scheduling options

def test_scheduling_options_are_in_effect(env):
    out = env.c.run(env.ctld, "scontrol show config").stdout
    config = dict(re.findall(r"^(\w+)\s+= (.*?)\s*$", out, re.M))
    assert config["SchedulerType"] == "sched/backfill"
    assert config["PriorityType"] == "priority/multifactor"
    assert config["PriorityDecayHalfLife"] == "7-00:00:00"
    assert config["SelectType"] == "select/cons_tres"
    # 24.11 shows preempt/none as no plugin at all.
    assert "PreemptType=preempt/none" in env.configs["slurm.conf"].split("\n")
    assert config["PreemptType"] == "(null)"
    assert config["PreemptMode"] == "OFF"
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert config["SchedulerParameters"] == "bf_interval=1"
    assert config["TopologyPlugin"] == "topology/tree"


# ---------------------------------------------------------------- 7. backfill

def backfilled_jobs(env) -> int:
    out = env.c.run(env.ctld, "sdiag").stdout
    return int(re.search(r"Total backfilled jobs \(since last slurm start\): (\d+)", out).group(1))


def test_backfill_starts_a_short_job_before_a_blocked_big_one(env):
    before = backfilled_jobs(env)
    # h100-0 is busy for up to 5 minutes, so a job needing all three h100 nodes
    # cannot start before then...
    long = env.sbatch("-A vision -w h100-0 --exclusive --time=5 -o /dev/null --wrap 'sleep 300'")
    env.wait_state(long, "RUNNING")
    big = env.sbatch("-A vision -N3 --exclusive --time=10 -o /dev/null --wrap 'sleep 5'")
    try:
        env.wait_for(lambda: env.job_field(big, "Reason") in ("Resources", "Priority"), 20,
                     f"job {big} to wait for resources")
        # ...and a 1-minute job submitted after it, same user, lower priority (younger),
        # fits into the gap: only the backfill scheduler may start it (the main
        # scheduler stops at the first blocked job of a partition).
        short = env.sbatch("-A vision -N1 --time=1 -o /dev/null --wrap 'sleep 20'")
        env.wait_state(short, "RUNNING", timeout=30)
        assert env.job_field(big, "JobState") == "PENDING"
        assert int(env.job_field(short, "Priority")) <= int(env.job_field(big, "Priority"))
        assert backfilled_jobs(env) > before
        assert env.ctl.job_counts() == (2, 1)
    finally:
        env.sh(f"scancel {long} {big}")
    env.sh(f"scancel {short}")
    env.c.wait_job(short, 30)


# ---------------------------------------------------------------- 8. accounting

def test_sacct_records_account_and_gpu_tres(env):
    job = env.sbatch("-A vision --gres=gpu:2 -o /dev/null --wrap 'sleep 1'")
    assert env.c.wait_job(job, 60) == "COMPLETED"
    env.wait_sacct_state(job, "COMPLETED")
    user, account, tres = env.sacct(job, "User,Account,AllocTRES").split("|")
    assert (user, account) == ("alice", "vision")
    assert "gres/gpu=2" in tres.split(","), tres
    # AccountingStorageTRES=gres/gpu counts GPUs of any type (no gres/gpu:h100 column).

    running = env.sbatch("-A vision -o /dev/null --wrap 'sleep 30'")
    env.wait_state(running, "RUNNING")
    assert env.ctl.job_counts() == (1, 0)
    env.sh(f"scancel {running}")
    env.c.wait_job(running, 30)
    assert env.ctl.job_counts() == (0, 0)


# ---------------------------------------------------------------- 8b. metrics

def _sinfo_nodes(env) -> list[dict]:
    """Per node and partition: sinfo's own view (state, CPUs A/I/O/T, GPUs in use)."""
    rows = []
    out = env.c.run(env.ctld, "sinfo -N -h -O NodeList:40,Partition:40,StateLong:40,CPUsState:40,GresUsed:80").stdout
    for line in out.splitlines():
        node, partition, state, cpus, gres_used = line.split()
        allocated, idle, other, total = (int(n) for n in cpus.split("/"))
        gpus = sum(int(m) for m in re.findall(r"gpu(?::[^:(,]+)?:(\d+)", gres_used))
        rows.append({"node": node, "partition": partition.rstrip("*"), "state": state.rstrip("*~#!%$@^-"),
                     "cpus": (allocated, idle, total), "gpus_used": gpus})
    return rows


def test_metric_samples_agree_with_sinfo_and_squeue_at_the_same_moment(env):
    """The samples the operator builds from its own reads (scontrol show nodes, one squeue,
    one sdiag), scraped as Prometheus text, against sinfo and squeue run right after."""
    running = env.sbatch("-A vision -p gpu --gres=gpu:2 -c 2 -o /dev/null --wrap 'sleep 120'")
    env.wait_state(running, "RUNNING")
    after = env.sbatch(f"-A vision -p gpu --dependency=afterok:{running} -o /dev/null --wrap 'sleep 1'")
    held = env.sbatch("-A nlp -p cpu --hold -o /dev/null --wrap 'sleep 1'", user="bob")
    try:
        env.wait_for(lambda: env.job_field(after, "Reason") == "Dependency", 20, f"job {after} to wait on {running}")
        nodes, jobs, stats = env.ctl.nodes(), env.ctl.jobs(), env.ctl.scheduler_statistics()
        sinfo = _sinfo_nodes(env)
        squeue = env.c.run(env.ctld, "squeue -h -a -o '%P|%a|%T|%r'").stdout.splitlines()

        collector = ClusterStateCollector()
        collector.publish("hpc", CLUSTER, slurm_state_samples(["h100", "cpu"], nodes, jobs, stats, slurmdbd_up=True))
        registry = CollectorRegistry()
        registry.register(collector)
        scraped = {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}

        def gauge(name, **labels):
            found = [s.value for s in scraped.get(name, []) if labels.items() <= s.labels.items()]
            return sum(found)

        assert gauge("kubeslurm_slurmctld_up", cluster=CLUSTER) == 1
        for row in sinfo:  # every state sinfo shows is one our metrics know
            assert row["state"] in NODE_STATES, row
        partitions = {row["partition"] for row in sinfo}
        assert partitions == {"gpu", "cpu"}
        for partition in partitions:
            for state in NODE_STATES:
                expected = sum(1 for row in sinfo if row["partition"] == partition and row["state"] == state)
                assert gauge("kubeslurm_slurm_partition_nodes", partition=partition, state=state) == expected, (partition, state)
        for node_set in ("h100", "cpu"):
            rows = [row for row in sinfo if row["node"].startswith(node_set + "-")]
            for state in NODE_STATES:
                assert gauge("kubeslurm_slurm_nodes", nodeset=node_set, state=state) == sum(r["state"] == state for r in rows)
            assert gauge("kubeslurm_slurm_allocated_cpus", nodeset=node_set) == sum(r["cpus"][0] for r in rows)
            assert gauge("kubeslurm_slurm_idle_cpus", nodeset=node_set) == sum(r["cpus"][1] for r in rows)
            assert gauge("kubeslurm_slurm_cpus", nodeset=node_set) == sum(r["cpus"][2] for r in rows)
            assert gauge("kubeslurm_slurm_allocated_gpus", nodeset=node_set) == sum(r["gpus_used"] for r in rows)
        assert gauge("kubeslurm_slurm_gpus", nodeset="h100") == 8 * len(H100)
        assert gauge("kubeslurm_slurm_allocated_gpus", nodeset="h100") == 2
        assert gauge("kubeslurm_slurm_idle_gpus", nodeset="h100") == 8 * len(H100) - 2

        by_squeue: dict[tuple[str, str, str], int] = {}
        pending_by_squeue: dict[tuple[str, str], int] = {}
        for line in squeue:
            partition, account, state, reason = line.split("|")
            by_squeue[(partition, account, state.lower())] = by_squeue.get((partition, account, state.lower()), 0) + 1
            if state == "PENDING":
                pending_by_squeue[(partition, reason)] = pending_by_squeue.get((partition, reason), 0) + 1
        assert {(s.labels["partition"], s.labels["account"], s.labels["state"]): s.value
                for s in scraped["kubeslurm_slurm_jobs"]} == by_squeue
        assert {(s.labels["partition"], s.labels["reason"]): s.value
                for s in scraped["kubeslurm_slurm_pending_jobs"]} == pending_by_squeue
        assert pending_by_squeue == {("gpu", "Dependency"): 1, ("cpu", "JobHeldUser"): 1}
        assert by_squeue[("gpu", "vision", "running")] == 1

        # Slurm 24.11's real sdiag has every statistic the parser knows, but for the main
        # scheduler's means, which it prints only once it has counted a cycle (a fresh slurmctld has not)
        assert set(KNOWN.values()) - set(stats) <= {"main_mean_cycle_us", "main_mean_depth"}
        assert gauge("kubeslurm_slurm_scheduler_cycles", scheduler="main") == stats["main_cycles"]
        assert gauge("kubeslurm_slurm_scheduler_cycles", scheduler="backfill") >= 1  # bf_interval=1
        assert 0 < gauge("kubeslurm_slurm_scheduler_cycle_seconds", scheduler="backfill", stat="max") < 60
        assert gauge("kubeslurm_slurm_backfilled_jobs") == stats["backfilled_jobs"]
    finally:
        env.sh(f"scancel {running} {after}")
        env.sh(f"scancel {held}", user="bob")
        env.c.wait_job(running, 30)


# ---------------------------------------------------------------- 9. scale-down

def test_scale_down_drains_waits_for_the_job_then_deletes_the_node(env):
    pods = set(H100)

    def plan(wanted, running_pods):
        nodes = env.nodes()
        leaving = [f"h100-{i}" for i in range(wanted, 3)]
        return plan_scale("h100", wanted=wanted, current=3, slurm_nodes=nodes,
                          jobs=env.ctl.jobs_on(leaving), running_pods=running_pods)

    job = env.sbatch("-A vision -w h100-2 -o /dev/null --wrap 'sleep 20'")
    env.wait_state(job, "RUNNING")
    # A human drains another node; the operator must leave that alone.
    env.c.run(env.ctld, "scontrol update NodeName=h100-1 State=DRAIN Reason='bad DIMM'")

    p = plan(2, pods)
    assert (p.replicas, p.drain, p.delete, p.waiting_for_jobs) == (3, ["h100-2"], [], {"h100-2": [job]})
    env.ctl.drain(p.drain, "scale-down of NodeSet h100 to 2")
    drained = env.c.run(env.ctld, "scontrol -o show node h100-2").stdout.strip()
    print("\ndrained dynamic node with a job:", drained)
    node = env.nodes()["h100-2"]
    # scontrol says MIXED+DRAIN+DYNAMIC_NORM (sinfo: "draining") while the job runs.
    assert node.drained_by_operator and node.base_state == "MIXED", node

    # Next reconcile: keep the pod, wait for the job; nothing new lands on h100-2.
    p = plan(2, pods)
    assert (p.replicas, p.drain, p.resume, p.delete, p.waiting_for_jobs) == (3, [], [], [], {"h100-2": [job]})
    blocked = env.sbatch("-A vision -w h100-2 -o /dev/null --wrap true")
    env.wait_for(lambda: env.job_field(blocked, "Reason").startswith("ReqNodeNotAvail"), 15,
                 f"job {blocked} to wait for the drained node")
    env.sh(f"scancel {blocked}")

    # The job is not killed: it completes.
    assert env.c.wait_job(job, 60) == "COMPLETED"
    env.wait_sacct_state(job, "COMPLETED")
    assert env.nodes()["h100-2"].states >= {"IDLE", "DRAIN"}

    # Empty: lower replicas. The pod still exists, so its record stays (slurmd would re-register).
    p = plan(2, pods)
    assert (p.replicas, p.drain, p.resume, p.delete, p.waiting_for_jobs) == (2, [], [], [], {})
    # Kubernetes removes the pod.
    env.c.stop_host("h100-2")
    pods.discard("h100-2")
    p = plan(2, pods)
    assert (p.replicas, p.drain, p.resume, p.delete) == (2, [], [], ["h100-2"])
    env.ctl.delete_nodes(p.delete)
    assert sorted(env.sh("sinfo -h -N -o %N").stdout.split()) == ["cpu-0", "h100-0", "h100-1"]
    assert plan(2, pods).settled

    # The human's drain survived every plan.
    h1 = env.nodes()["h100-1"]
    assert h1.drained and h1.reason == "bad DIMM", h1
    env.c.run(env.ctld, "scontrol update NodeName=h100-1 State=RESUME")


def test_a_deleted_node_registers_again_when_its_pod_returns(env):
    env.c.start_node("h100-2")
    env.wait_for(lambda: env.nodes().get("h100-2") and env.nodes()["h100-2"].base_state == "IDLE",
                 60, "h100-2 to register again")
    node = env.nodes()["h100-2"]
    assert not node.drained and node.gpus == 8, node
    out = env.sh("srun -A vision -w h100-2 --gres=gpu:1 hostname").stdout.strip()
    assert out == "h100-2"


def test_many_node_records_go_in_one_scontrol_and_one_already_gone_stops_none(env):
    """Records made the way Slurm allows without a slurmd (State=CLOUD, as the kwok benchmark
    makes 1000), drained and deleted by the operator's SlurmControl with one command each."""
    commands = []

    def counted(argv, timeout=60):
        commands.append(argv)
        return env.run_in_controller(argv, timeout)

    ctl = SlurmControl(counted)
    env.c.run(env.ctld, ["scontrol", "create", "NodeName=spare-[0-19]", "CPUs=1", "RealMemory=100", "State=CLOUD"])
    spares = [f"spare-{i}" for i in range(20)]
    assert set(spares) <= set(env.nodes())
    ctl.drain(spares, "scale-down of NodeSet spare to 0")
    assert all(env.nodes()[n].drained_by_operator for n in spares)
    ctl.delete_nodes(spares[:10])
    assert [c[:2] for c in commands] == [["scontrol", "update"], ["scontrol", "delete"]], commands
    assert commands[-1][2] == "NodeName=spare-[0-9]"
    ctl.delete_nodes(spares[5:])  # spare-5..9 are gone already: the rest still go
    assert not [n for n in env.nodes() if n.startswith("spare-")]


def test_the_state_volume_is_measured_where_slurmctld_saves_its_state(env):
    """The operator's df of StateSaveLocation, through its SlurmControl on the controller host:
    the image's df prints what state_volume.parse_df reads; a volume with room is no problem."""
    from kubeslurm.reconcile.state_volume import state_volume_problem

    usage = env.ctl.volume_usage(env.configs["slurm.conf"].split("StateSaveLocation=", 1)[1].split()[0])
    assert 0 < usage.available_bytes <= usage.size_bytes, usage
    # The native hosts' state directory is on this machine's disk: full only when that is.
    assert state_volume_problem(usage, "ns/claim") is None, (usage, "this machine's disk is (nearly) full")


def test_a_lost_slurmd_is_marked_down_and_its_job_requeued_at_once(env):
    """A pod that died without its preStop hook (power loss) and came back under its name:
    Slurm alone sees the same boot time and keeps the job RUNNING; the operator's verdict
    (a pod created after the job started) marks the node DOWN and the job requeues now."""
    job = env.sbatch("-A vision -p cpu -w cpu-0 -o /dev/null --wrap 'sleep 20'")
    env.wait_state(job, "RUNNING")
    seen = {j.id: j for j in env.ctl.jobs()}[job]
    assert seen.state == "RUNNING" and seen.nodes == ("cpu-0",), seen
    assert abs(seen.start - time.time()) < 60, seen  # squeue printed epoch seconds

    env.c.stop_host("cpu-0")
    replaced = time.time()
    env.c.start_node("cpu-0")
    pod = {"metadata": {"name": "cpu-0", "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(replaced + 1))},
           "spec": {"nodeName": "k1"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    k8s_nodes = {"k1": {"metadata": {"name": "k1"}}}
    env.wait_for(lambda: "NOT_RESPONDING" not in env.nodes()["cpu-0"].states, 60, "the new slurmd of cpu-0 to answer")
    assert env.job_field(job, "JobState") == "RUNNING"  # what Slurm believes on its own

    down, resume = lost_slurmd_actions([pod], k8s_nodes, env.nodes(), env.ctl.jobs())
    assert down == {"cpu-0": f"slurmd pod lost: pod cpu-0 was replaced after jobs {job} started on it"}, down
    marked = time.monotonic()
    env.ctl.down(["cpu-0"], down["cpu-0"])
    env.wait_for(lambda: env.job_field(job, "JobState") == "PENDING", 15, f"job {job} requeued")
    print(f"\njob {job} requeued {time.monotonic() - marked:.1f} s after the node was marked DOWN")
    assert env.job_field(job, "Restarts") == "1"

    # Next reconcile: this slurmd registered before the DOWN, so the operator gives the node back,
    # unless slurmctld's next ping already did (ReturnToService=2 once the node answers).
    env.wait_for(lambda: not env.ctl.jobs() or not any(j.holds_nodes for j in env.ctl.jobs()), 30, "cpu-0 released")
    nodes = env.nodes()
    down, resume = lost_slurmd_actions([pod], k8s_nodes, nodes, env.ctl.jobs())
    assert down == {}
    answering_but_down = {"DOWN"} <= nodes["cpu-0"].states and "NOT_RESPONDING" not in nodes["cpu-0"].states
    assert resume == (["cpu-0"] if answering_but_down else []), (resume, nodes["cpu-0"])
    env.ctl.resume(resume)
    # It may start again after cred_expire (60 s), at the main scheduler's next pass
    # (sched_interval, 60 s: nothing else wakes the scheduler when a begin time passes).
    try:
        env.wait_for(lambda: env.job_field(job, "JobState") == "COMPLETED", 200, f"requeued job {job} to complete")
    except AssertionError:
        print(env.c.run(env.ctld, f"scontrol -o show job {job}; scontrol -o show node cpu-0; date", check=False).stdout)
        raise
    print(f"requeued job {job} completed {time.monotonic() - marked:.1f} s after the DOWN (cred_expire hold, next scheduler pass, 20 s run)")


def test_a_slurmd_crashed_in_its_pod_marks_its_node_down_before_it_registers_again(env):
    """slurmd and its job steps killed at once, the host kept (a slurmd container that crashed
    and that the kubelet reruns in the same pod): the container's command (SLURMD_START)
    finds the marker the first run left in /run/slurm, marks the node DOWN before slurmd
    starts, so the --requeue job is requeued (Slurm alone would end it NODE_FAIL when the new
    slurmd registers without it) and the --no-requeue one ends; ReturnToService=2 takes the
    node back once slurmd registers, with no other help."""
    again = env.sbatch("-A vision -p cpu -w cpu-0 --requeue -o /dev/null --wrap 'sleep 20'")
    once = env.sbatch("-A vision -p cpu -w cpu-0 --no-requeue -o /dev/null --wrap 'sleep 20'")
    for job in (again, once):
        env.wait_state(job, "RUNNING")
    env.c.run("cpu-0", f"mkdir -p {RESTART_MARKER.rsplit('/', 1)[0]} && : > {RESTART_MARKER}")  # the first run's
    env.c.restart_slurmd("cpu-0", ["/usr/bin/env", "POD_NAME=cpu-0", "/bin/sh", "-c", SLURMD_START, "slurmd"])
    env.wait_for(lambda: env.job_field(again, "Restarts") == "1", 30, f"job {again} requeued")
    assert env.job_field(again, "JobState") in ("PENDING", "REQUEUED"), env.job_field(again, "JobState")
    env.wait_for(lambda: env.job_field(once, "JobState") == "NODE_FAIL", 30, f"job {once} ended NODE_FAIL")
    def in_service():
        node = env.nodes()["cpu-0"]
        return node.base_state in ("IDLE", "ALLOCATED", "MIXED") and not node.drained and not node.states & {"DOWN", "NOT_RESPONDING"}
    env.wait_for(in_service, 60, "cpu-0 back in service after its slurmd registered")
    down = env.c.logs("slurmctld")
    assert "slurmd restarted in pod cpu-0" in down, down[-3000:]
    env.wait_for(lambda: env.job_field(again, "JobState") == "COMPLETED", 200, f"requeued job {again} to complete")


# ---------------------------------------------------------------- 10. reconfigure

def test_reconfigure_adds_a_partition_without_killing_jobs(env):
    docs = contract_documents()
    cluster = next(d for d in docs if d["kind"] == "SlurmCluster")
    cluster["spec"]["partitions"].append({"name": "all", "nodeSets": ["h100", "cpu"]})
    model, node_sets = load(docs)
    configs = render_config_files(model, list(node_sets.values()), PLACEMENTS)
    assert "PartitionName=all Nodes=h100,cpu" in configs["slurm.conf"]

    job = env.sbatch("-A vision -p cpu -o /dev/null --wrap 'sleep 15'")
    env.wait_state(job, "RUNNING")
    assert env.sh("sinfo -h -p all", check=False).stdout.strip() == ""
    for name, text in configs.items():
        env.c.run(env.ctld, f"cat > /etc/slurm/{name}", input=text)
    env.ctl.reconfigure()
    env.wait_for(lambda: env.ctl.ping(), 30, "slurmctld to answer after reconfigure")
    env.wait_for(lambda: sorted(env.sh("sinfo -h -N -p all -o %N", check=False).stdout.split())
                 == sorted(H100 + CPU), 30, "partition all with every node")
    assert env.job_field(job, "JobState") == "RUNNING"
    env.wait_for(lambda: env.job_field(job, "JobState") == "COMPLETED", 60, f"job {job} to complete")
    env.wait_sacct_state(job, "COMPLETED")
    out = env.sh("srun -A vision -p all -N4 hostname").stdout.split()
    assert sorted(out) == sorted(H100 + CPU)
    # Every daemon took the new files without a restart: the login host's sackd
    # re-executed itself in place (same process) and cached the new slurm.conf, and
    # each slurmd still answers (its re-executed self found its config cache).
    assert env.c.daemons["sackd"].proc.poll() is None, env.c.logs("sackd")
    assert "PartitionName=all" in env.c.run(LOGIN, "cat /run/slurm/conf/slurm.conf").stdout
    assert "execv() failed" not in env.c.logs("sackd")
    for name in H100 + CPU:
        assert env.c.daemons[name].proc.poll() is None, env.c.logs(name)
