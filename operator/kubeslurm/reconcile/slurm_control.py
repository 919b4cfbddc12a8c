"""Everything kubeslurm asks of Slurm, in one place: node state, drain, resume, delete, reconfigure, accounts.

Commands are Slurm's own CLI (scontrol, squeue, sacctmgr) run inside the slurmctld
pod through the Kubernetes exec API (`PodExec`), or through any other runner with
the same signature (the real-Slurm test tier runs them in a network namespace).
Why the CLI and not slurmrestd: it needs no second daemon and no JWT setup, it
authenticates with the cluster's own key inside the controller pod, and its
behaviour is the one Slurm admins know. The price is the `pods/exec` permission.
"""

import re
import shlex
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..metrics.sdiag import SchedulerStatistics, parse_sdiag
from ..render.bridge.placeholder_job import PlaceholderRequest, sbatch_argv, scancel_argv, squeue_placeholders_argv
from ..render.config.accounting_commands import AssociationRemoval, SlurmAssociations
from .bridge_plan import PlaceholderState
from .job_allocation import JobAllocation, parse_job_allocation, parse_placeholder_lines
from .slurm_hostlist import compress, expand
from .state_volume import VolumeUsage, df_argv, parse_df

OPERATOR_REASON_PREFIX = "kubeslurm:"
# scontrol's answer to State=RESUME for a node that is neither DOWN nor DRAINED (in service already).
RESUMED_ALREADY = "Invalid node state specified"
# Job states that still hold a node's resources (squeue --states).
HOLDING_STATES = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STAGE_OUT"
# What sacctmgr 24.11 says (exit code 1) when a command finds its work already done:
# `add cluster` "This cluster X already exists.  Not adding.", `add account`
# "Already existing account X on cluster Y", `add user` of an existing association
# "Request didn't affect anything\nNothing added.", `modify` "Nothing modified".
SACCTMGR_UNCHANGED = ("already exists", "already existing", "nothing added", "nothing new added", "nothing modified")
# `delete` of an association that is gone already: "Nothing deleted" (exit code 1).
SACCTMGR_GONE = "nothing deleted"
# `delete` of an association with running or pending jobs: "Job(s) active, cancel job(s) before remove".
SACCTMGR_JOBS_ACTIVE = "job(s) active"
# What scontrol says of a node name slurmctld does not know (e.g. a record deleted already).
INVALID_NODE = "Invalid node name"


class CommandRunner(Protocol):
    def __call__(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess: ...


class SlurmCommandError(RuntimeError):
    pass


@dataclass
class SlurmNode:
    name: str
    states: set[str]
    reason: str = ""
    gres: str = ""
    features: list[str] = field(default_factory=list)
    # For the metrics (metrics/slurm_state.py): CPUs, what jobs hold of them, GPUs held, partitions.
    cpus: int = 0
    allocated_cpus: int = 0
    allocated_gpus: int = 0
    partitions: list[str] = field(default_factory=list)

    @property
    def base_state(self) -> str:
        return next(iter(sorted(self.states & {"IDLE", "ALLOCATED", "MIXED", "DOWN", "FUTURE", "UNKNOWN"})), "UNKNOWN")

    @property
    def drained(self) -> bool:
        return bool(self.states & {"DRAIN", "DRAINED", "DRAINING"})

    @property
    def down(self) -> bool:
        return "DOWN" in self.states or "NOT_RESPONDING" in self.states

    @property
    def drained_by_operator(self) -> bool:
        return self.drained and self.reason.startswith(OPERATOR_REASON_PREFIX)

    @property
    def gpus(self) -> int:
        total = 0
        for item in self.gres.split(","):
            parts = item.split("(")[0].split(":")
            if parts and parts[0] == "gpu" and parts[-1].isdigit():
                total += int(parts[-1])
        return total


@dataclass(frozen=True)
class SlurmJob:
    id: str
    state: str
    start: int | None  # epoch seconds; None until it starts
    nodes: tuple[str, ...]
    # For the metrics: the partition(s) asked for, the account, and why it waits ("None" once it runs).
    partition: str = ""
    account: str = ""
    reason: str = ""

    @property
    def holds_nodes(self) -> bool:
        return self.state in HOLDING_STATES.split(",")


# Nodes (%N) last: a hostlist holds commas and brackets, never "|".
SQUEUE_FORMAT = "%i|%T|%S|%P|%a|%r|%N"


def parse_job_line(line: str) -> SlurmJob:
    """One line of `squeue --format=SQUEUE_FORMAT` with SLURM_TIME_FORMAT=%s (start as epoch seconds)."""
    fields = line.strip().split("|", 6)
    if len(fields) != 7:  # e.g. an exec error printed in place of squeue's output
        raise SlurmCommandError(f"unexpected squeue line: {line.strip()[:200]!r}")
    job, state, start, partition, account, reason, hosts = fields
    return SlurmJob(
        job, state, int(start) if start.isdigit() else None, tuple(expand(hosts)) if hosts else (),
        partition=partition, account=account, reason=reason,
    )


_FIELD_START = re.compile(r" (?=[A-Za-z_]+=)")


def parse_node_line(line: str) -> SlurmNode:
    """One line of `scontrol -o show nodes`. Values may hold spaces (OS=, Reason=), keys never do."""
    fields: dict[str, str] = {}
    reason = ""
    if " Reason=" in line:
        line, reason = line.split(" Reason=", 1)
        reason = re.sub(r" \[[^\]]*\]$", "", reason.strip())  # drop "[user@time]"
    for token in _FIELD_START.split(line.strip()):
        key, _, value = token.partition("=")
        fields[key] = value.strip()
    allocated_tres = dict(item.partition("=")[::2] for item in fields.get("AllocTRES", "").split(",") if "=" in item)
    return SlurmNode(
        name=fields.get("NodeName", ""),
        states=set(fields.get("State", "UNKNOWN").replace("*", "+NOT_RESPONDING").split("+")) - {""},
        reason=reason,
        gres=fields.get("Gres", "") if fields.get("Gres") != "(null)" else "",
        features=[f for f in fields.get("AvailableFeatures", "").split(",") if f and f != "(null)"],
        cpus=_count(fields.get("CPUTot")),
        allocated_cpus=_count(fields.get("CPUAlloc")),
        # AllocTRES counts GPUs because slurm.conf tracks gres/gpu (AccountingStorageTRES)
        allocated_gpus=_count(allocated_tres.get("gres/gpu")),
        partitions=[p for p in fields.get("Partitions", "").split(",") if p and p != "(null)"],
    )


def _count(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


@dataclass
class SlurmControl:
    run: CommandRunner
    # Set once a command of this object changed node states or records (down, drain, resume,
    # delete_nodes): what was read of the nodes before is out of date (Run.again_soon).
    changed_nodes: bool = field(default=False, init=False)

    def _ok(self, argv: list[str], timeout: float = 60) -> str:
        result = self.run(argv, timeout=timeout)
        if result.returncode != 0:
            raise SlurmCommandError(f"{shlex.join(argv)} failed ({result.returncode}): {(result.stderr or result.stdout).strip()}")
        return result.stdout

    def ping(self) -> bool:
        result = self.run(["scontrol", "ping"], timeout=20)
        return result.returncode == 0 and "UP" in result.stdout

    def nodes(self) -> list[SlurmNode]:
        out = self._ok(["scontrol", "--oneliner", "show", "nodes"])
        return [parse_node_line(line) for line in out.splitlines() if line.startswith("NodeName=")]

    def jobs_on(self, node_names: list[str]) -> dict[str, list[str]]:
        """Node -> ids of jobs that still hold it. Empty lists mean safe to remove."""
        if not node_names:
            return {}
        return {node: [job.id for job in held] for node, held in jobs_holding(self.jobs(), node_names).items()}

    def expand_hostlist(self, hostlist: str) -> list[str]:
        if "[" not in hostlist:
            return [h for h in hostlist.split(",") if h]
        return self._ok(["scontrol", "show", "hostnames", hostlist]).split()

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld holds, with its state, start time and nodes: one squeue call."""
        out = self._ok(["env", "SLURM_TIME_FORMAT=%s", "squeue", "--noheader", "--all", f"--format={SQUEUE_FORMAT}"])
        return [parse_job_line(line) for line in out.splitlines() if line.strip()]

    # The bridge's placeholder jobs (render/bridge/placeholder_job.py, docs/design/slurm-scheduled-pods.md).
    def submit_placeholder(self, request: PlaceholderRequest) -> str:
        """The job id of a new placeholder job for one pod."""
        out = self._ok(sbatch_argv(request)).strip()
        job_id = out.split(";")[0]  # --parsable: "<id>" or "<id>;<cluster>"
        if not job_id.isdigit():
            raise SlurmCommandError(f"sbatch printed {out[:200]!r}, not a job id")
        return job_id

    def cancel_placeholder(self, job_id: str) -> None:
        """Ends the job; with a hold file its resources stay held until the pod is gone."""
        self._ok(scancel_argv(job_id))

    def placeholder_jobs(self, users: list[str]) -> list[PlaceholderState]:
        """Every placeholder job of the bridge's users, with its state, pod UID and nodes: one squeue."""
        return parse_placeholder_lines(self._ok(squeue_placeholders_argv(users)))

    def job_allocation(self, job_id: str) -> JobAllocation:
        """The job's state and, once it runs, each node's CPUs, memory and GPU indices."""
        return parse_job_allocation(self._ok(["scontrol", "--details", "show", "job", str(int(job_id))]))

    def scheduler_statistics(self) -> SchedulerStatistics:
        """slurmctld's scheduler statistics (`sdiag`): cycle times, depths, queue lengths."""
        return parse_sdiag(self._ok(["sdiag"]))

    def volume_usage(self, path: str) -> VolumeUsage:
        """Size and free space of the file system holding `path` in the controller pod (`df`):
        not Slurm, but read where Slurm's state lives, through the same exec."""
        try:
            return parse_df(self._ok(df_argv(path), timeout=20))
        except ValueError as error:
            raise SlurmCommandError(str(error)) from None

    def job_counts(self) -> tuple[int, int]:
        return job_counts(self.jobs())

    # Each of these is one scontrol for any number of nodes, named as a compressed hostlist
    # (cpu-[0-999]): a reconcile's Slurm commands do not grow with the nodes it acts on.
    def down(self, node_names: list[str], why: str) -> None:
        """DOWN: Slurm requeues (or ends, per --requeue) the nodes' jobs at once."""
        if node_names:
            self.changed_nodes = True
            self._ok(["scontrol", "update", f"NodeName={compress(node_names)}", "State=DOWN",
                      f"Reason={OPERATOR_REASON_PREFIX} {why}"])

    def drain(self, node_names: list[str], why: str) -> None:
        if node_names:
            self.changed_nodes = True
            reason = f"{OPERATOR_REASON_PREFIX} {why}"
            self._ok(["scontrol", "update", f"NodeName={compress(node_names)}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node_names: list[str]) -> None:
        """Back in service. A node that is no longer DOWN or DRAINED by then (slurmctld's own
        ReturnToService, or an admin, got there between our read and this call) makes scontrol
        refuse: that is the wanted state already, and the next reconcile reads the nodes again."""
        if not node_names:
            return
        self.changed_nodes = True
        try:
            self._ok(["scontrol", "update", f"NodeName={compress(node_names)}", "State=RESUME"])
        except SlurmCommandError as error:
            if RESUMED_ALREADY not in str(error):
                raise

    def delete_nodes(self, node_names: list[str]) -> None:
        """Delete the node records; one that is gone already counts as deleted. slurmctld
        refuses the whole list when one name is unknown: then each is deleted on its own."""
        if not node_names:
            return
        self.changed_nodes = True
        result = self.run(["scontrol", "delete", f"NodeName={compress(node_names)}"])
        text = result.stderr + result.stdout
        if result.returncode == 0 or (len(node_names) == 1 and INVALID_NODE in text):
            return
        if INVALID_NODE in text:
            for name in node_names:
                self.delete_nodes([name])
            return
        raise SlurmCommandError(f"scontrol delete NodeName={compress(node_names)}: {(result.stderr or result.stdout).strip()}")

    def reconfigure(self) -> None:
        self._ok(["scontrol", "reconfigure"])

    def sacctmgr(self, commands: list[list[str]]) -> None:
        """Run sacctmgr commands; adding what already exists is fine (the list is idempotent)."""
        for args in commands:
            result = self.run(["sacctmgr", "--immediate", *args])
            text = (result.stdout + result.stderr).lower()
            if result.returncode != 0 and not any(harmless in text for harmless in SACCTMGR_UNCHANGED):
                raise SlurmCommandError(f"sacctmgr {shlex.join(args)} failed: {text.strip()}")

    def associations(self, cluster: str) -> SlurmAssociations:
        """The cluster's associations: users and sub-accounts of each account, users' default accounts."""
        assoc = self._ok(["sacctmgr", "--noheader", "--parsable2", "show", "assoc", "where", f"cluster={cluster}",
                          "format=Account,ParentName,User"])
        users = self._ok(["sacctmgr", "--noheader", "--parsable2", "show", "user", "format=User,DefaultAccount"])
        return parse_associations(assoc, users)

    def known_users(self, names: list[str]) -> set[str]:
        """Which of `names` the controller pod's name service knows (its files, then the directory
        through SSSD in ldap mode): one `getent passwd` for all of them, which prints the entries
        it found and exits 2 when any name is missing."""
        if not names:
            return set()
        result = self.run(["getent", "passwd", *names], timeout=60)
        if result.returncode not in (0, 2):
            raise SlurmCommandError(f"getent passwd failed ({result.returncode}): {(result.stderr or result.stdout).strip()[:200]}")
        return parse_passwd_names(result.stdout) & set(names)

    def remove_associations(self, removals: list[AssociationRemoval]) -> list[AssociationRemoval]:
        """Run each removal's commands; return the removals Slurm refused because jobs are active
        (they are tried again later). An association that is gone already counts as removed."""
        waiting: list[AssociationRemoval] = []
        for removal in removals:
            if {w.key for w in waiting} & set(removal.after):
                waiting.append(removal)  # Slurm would refuse it while that one stands
                continue
            for args in removal.commands:
                result = self.run(["sacctmgr", "--immediate", *args])
                text = (result.stdout + result.stderr).lower()
                if result.returncode == 0 or SACCTMGR_GONE in text or any(same in text for same in SACCTMGR_UNCHANGED):
                    continue
                if SACCTMGR_JOBS_ACTIVE in text:
                    waiting.append(removal)
                    break
                raise SlurmCommandError(f"sacctmgr {shlex.join(args)} failed: {text.strip()}")
        return waiting


def parse_passwd_names(text: str) -> set[str]:
    """The user names of passwd lines (`name:x:uid:gid:gecos:home:shell`)."""
    return {line.split(":", 1)[0] for line in text.splitlines() if line.count(":") >= 6}


def parse_associations(assoc: str, users: str) -> SlurmAssociations:
    """`sacctmgr -n -P show assoc format=Account,ParentName,User` and `show user format=User,DefaultAccount`.

    An account's own association has no user and names its parent; a user's has the user.
    """
    members: dict[str, set[str]] = {}
    children: dict[str, set[str]] = {}
    for line in assoc.splitlines():
        if line.count("|") != 2:
            continue
        account, parent, user = line.split("|")
        if user:
            members.setdefault(account, set()).add(user)
        else:
            members.setdefault(account, set())
            if parent:
                children.setdefault(parent, set()).add(account)
    defaults = {}
    for line in users.splitlines():
        name, _, default = line.partition("|")
        if name and default:
            defaults[name] = default
    return SlurmAssociations(
        users={a: frozenset(u) for a, u in members.items()},
        sub_accounts={p: frozenset(c) for p, c in children.items()},
        default_accounts=defaults,
    )


def jobs_holding(jobs: list[SlurmJob], nodes: list[str] | None = None) -> dict[str, list[SlurmJob]]:
    """Node -> the jobs that still hold it (running, completing, ...); every node of `nodes` is
    a key, with an empty list when nothing holds it; without `nodes`, only the held ones."""
    holding: dict[str, list[SlurmJob]] = {node: [] for node in nodes or ()}
    for job in jobs:
        for node in job.nodes if job.holds_nodes else ():
            if nodes is None or node in holding:
                holding.setdefault(node, []).append(job)
    return holding


def job_counts(jobs: list[SlurmJob]) -> tuple[int, int]:
    """(running, pending)."""
    return sum(1 for j in jobs if j.state == "RUNNING"), sum(1 for j in jobs if j.state == "PENDING")


_EXEC_CLIENTS = threading.local()


def exec_api_client(api_client):
    """An ApiClient for exec only, one per thread. kubernetes.stream.stream() swaps its client's
    request method for a websocket one while an exec runs: every other call made on that client
    meanwhile (another cluster's reconcile in another thread) goes out as a websocket upgrade and
    fails with "Handshake status 200 OK"; two execs at once can leave the swap in place for good.
    Seen with two SlurmClusters in one operator (the fault tier)."""
    from kubernetes import client

    mine = getattr(_EXEC_CLIENTS, "clients", None)
    if mine is None:
        mine = _EXEC_CLIENTS.clients = {}
    if id(api_client) not in mine:
        mine[id(api_client)] = client.ApiClient(api_client.configuration)
    return mine[id(api_client)]


def pod_exec_runner(api_client, namespace: str, pod: str, container: str) -> Callable:
    """A CommandRunner that executes inside a pod (the slurmctld container)."""
    from kubernetes import client
    from kubernetes.stream import stream

    core = client.CoreV1Api(exec_api_client(api_client))

    def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        response = stream(
            core.connect_get_namespaced_pod_exec, pod, namespace, container=container, command=argv,
            stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
        )
        response.run_forever(timeout=timeout)
        stdout, stderr = response.read_stdout() or "", response.read_stderr() or ""
        try:
            code = response.returncode
        except (ValueError, KeyError, IndexError, TypeError) as error:
            # The error channel holds a failure that is no exit status (the container went away,
            # e.g. while its namespace is deleted): the client's parse of it fails. A failed command.
            code, stderr = None, f"{stderr}the exec failed: {error}\n"
        response.close()
        return subprocess.CompletedProcess(argv, code if code is not None else 1, stdout, stderr)

    return run
