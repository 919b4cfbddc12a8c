"""The job ledger: every job a test submits, and what `sacct` says became of it.

"No job lost" is a claim about every job, so the e2e story, the fault tests and the soak
record each job id the moment sbatch/srun gives it, and at the end ask the accounting
database (the record a site trusts, `sacct -D`: every run of every job) for each one:

- completed: its last run COMPLETED;
- requeued: it ran more than once (a run ended REQUEUED / NODE_FAIL, a later one went on);
- lost: anything else once the ledger is settled (never in sacct, or a last run that is not
  COMPLETED), plus jobs in sacct that nobody submitted (they would hide a renumbering). A job
  first submitted before the ledger started is an earlier ledger's (a test before this one in
  the session), even when sacct lists it in this window: it is not counted as unexpected.

A job a test expects to end otherwise (a --no-requeue job on a node that fails: Slurm ends it
NODE_FAIL) is recorded with must_complete=False: known to the ledger, checked by the test itself.

A submission whose answer never came (sbatch timed out or lost its connection while slurmctld
restarted) may still have made a job. A stream names each of its jobs (`--job-name`); the names
of unanswered submissions are kept, and a job in sacct under such a name is the ledger's: it
must complete like any other, and is not "never submitted".

An array job is recorded by its id; its tasks (ID_N in sacct) count as its runs, and it is
completed when every task's last run is.

The ledger runs Slurm's commands through a callable (`sh(script) -> stdout`, e.g. a
`kubectl exec` into the login pod as root), so it knows nothing of where Slurm runs.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from testbed.waiting import wait_for

# Job states after which a job runs no more (sacct's names; a requeued job's old run reads
# REQUEUED and is followed by a new row).
_STREAMS = itertools.count(1)  # streams of one process get distinct job names

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED")


@dataclass
class Outcome:
    """What sacct says of one recorded job: each run's state, oldest first."""

    job: str
    runs: list[str] = field(default_factory=list)

    @property
    def final(self) -> str:
        return self.runs[-1] if self.runs else "MISSING"

    @property
    def requeued(self) -> bool:
        return len(self.runs) > 1


@dataclass
class Summary:
    submitted: int
    completed: int
    requeued: int
    lost: list[str]
    unexpected: list[str]

    def line(self, what: str = "jobs") -> str:
        """The one-line summary a test prints."""
        extra = f"; in sacct but never submitted: {', '.join(self.unexpected)}" if self.unexpected else ""
        lost = f" ({', '.join(self.lost)})" if self.lost else ""
        return (f"ledger of {what}: submitted {self.submitted}, completed {self.completed}, "
                f"requeued {self.requeued}, lost {len(self.lost)}{lost}{extra}")


class JobLedger:
    """Thread-safe: a job stream records from its own thread while a test injects faults."""

    def __init__(self, sh: Callable[[str], str]):
        self.sh = sh
        # sacct -S takes local time without a zone; the Slurm pods run in UTC.
        self.started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        self._jobs: list[str] = []
        self._others: list[str] = []  # recorded with must_complete=False
        self._unanswered: set[str] = set()  # job names of submissions that got no answer
        self._lock = threading.Lock()

    @property
    def submitted(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def record(self, job: str, must_complete: bool = True) -> str:
        job = job.strip()
        if not job.split("_")[0].isdigit():
            raise ValueError(f"not a Slurm job id: {job!r}")
        with self._lock:
            (self._jobs if must_complete else self._others).append(job)
        return job

    @property
    def unanswered_names(self) -> set[str]:
        with self._lock:
            return set(self._unanswered)

    def unanswered(self, job_name: str) -> None:
        """A submission under this --job-name got no job id: sacct decides whether it made a job."""
        with self._lock:
            self._unanswered.add(job_name)

    def sbatch(self, args: str, user: str | None = None, *, run_as: Callable[[str, str], str] | None = None,
               must_complete: bool = True) -> str:
        """`sbatch --parsable ARGS` through sh (or run_as(script, user)); the job recorded."""
        script = f"sbatch --parsable {args}"
        out = run_as(script, user) if run_as else self.sh(script)
        return self.record(out.strip().splitlines()[-1].split(";")[0], must_complete)

    # -- what sacct says ---------------------------------------------------------

    def _sacct(self) -> str:
        """Every job sacct lists since the ledger started: each run's id, state, submit time and
        job name (-D)."""
        return self.sh(f"sacct -a -n -X -P -D -S {self.started} -o JobID,State,Submit,JobName")

    def _adopt_unanswered(self, sacct_output: str) -> None:
        """Records the jobs that unanswered submissions made after all (found by their names)."""
        with self._lock:
            names = set(self._unanswered)
            known = set(self._jobs) | set(self._others)
        if not names:
            return
        for job in sorted(jobs_named(sacct_output, names) - known, key=_job_order):
            self.record(job)

    def sacct_runs(self) -> dict[str, list[str]]:
        """Every job since the ledger started, each with every run's state (sacct -D), in order."""
        return parse_runs(self._sacct())

    def outcomes(self) -> dict[str, Outcome]:
        out = self._sacct()
        self._adopt_unanswered(out)
        return outcomes_of(self.submitted, parse_runs(out))

    def summary(self) -> Summary:
        out = self._sacct()
        self._adopt_unanswered(out)
        with self._lock:
            others = list(self._others)
        return summarize(self.submitted, parse_runs(out), others + sorted(submitted_before(out, self.started)))

    def settle(self, timeout: float, interval: float = 5) -> Summary:
        """Waits until every recorded job has a final state in sacct (a failed command counts as
        not yet: slurmctld or slurmdbd may be on their way back); returns the summary."""
        def settled():
            try:
                outcomes = self.outcomes()
                queued = self.queued()
            except Exception:  # noqa: BLE001 - the command's own error is the next attempt's
                return None
            return None if unsettled(outcomes, queued) else True
        wait_for(settled, timeout, f"every one of {len(self.submitted)} jobs in a final state in sacct",
                 interval=interval, details=lambda: self._unsettled())
        return self.summary()

    def queued(self) -> set[str]:
        """The jobs (arrays by their base id) slurmctld still holds: pending, running, completing.
        A requeued job waits out Slurm's requeue delay (BeginTime) before its new run has a row in
        sacct, so sacct alone shows its failed run as its last one for a while."""
        return set(self.sh("squeue -a -h -o %F").split())

    def _unsettled(self) -> str:
        try:
            return ", ".join(f"{j}: {state}" for j, state in unsettled(self.outcomes(), self.queued()).items())
        except Exception as error:  # noqa: BLE001
            return f"sacct/squeue: {error}"


class JobStream:
    """A stream of short jobs, one every `every` seconds from a thread of its own, each recorded
    in the ledger: the load a fault test runs under. Each submission is named `<name>-<n>`
    (--job-name). A submission that fails (slurmctld away) is counted and retried at the next
    tick; if it made a job after all (its answer lost), the ledger finds it by name."""

    def __init__(self, ledger: JobLedger, args: list[str] | str, every: float = 5.0,
                 submit: Callable[[str], str] | None = None):
        self.ledger = ledger
        self.args = [args] if isinstance(args, str) else list(args)
        self.every = every
        self.submit = submit or ledger.sbatch
        self.refused = 0
        self.name = f"ledger-stream-{next(_STREAMS)}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "JobStream":
        self._thread = threading.Thread(target=self._run, name="job-stream", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=120)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            job_name = f"{self.name}-{n}"
            try:
                self.submit(f"--job-name={job_name} {self.args[n % len(self.args)]}")
            except Exception:  # noqa: BLE001 - refused, or its answer lost: sacct will tell
                self.refused += 1
                self.ledger.unanswered(job_name)
            n += 1
            self._stop.wait(max(0.0, self.every - (time.monotonic() - t0)))


def parse_runs(sacct_output: str) -> dict[str, list[str]]:
    """`sacct -n -X -P -D -o JobID,State[,Submit]` -> job id: each run's state, in sacct's order
    ("CANCELLED by 1000" is CANCELLED)."""
    runs: dict[str, list[str]] = {}
    for line in sacct_output.splitlines():
        if "|" not in line:
            continue
        job, state = line.split("|")[:2]
        runs.setdefault(job.strip(), []).append(state.split()[0] if state.strip() else "")
    return runs


def submitted_before(sacct_output: str, started: str) -> set[str]:
    """`sacct ... -o JobID,State,Submit` -> the jobs (array tasks by their array) whose first
    submission is before `started` (both sacct's local ISO time, which compares as text). A
    requeue sets a job's Submit anew, so the earliest run's counts."""
    first: dict[str, str] = {}
    for line in sacct_output.splitlines():
        fields = line.split("|")
        if len(fields) < 3 or not fields[2].strip():
            continue
        job, submit = fields[0].strip().split("_")[0], fields[2].strip()
        first[job] = min(first.get(job, submit), submit)
    return {job for job, submit in first.items() if submit < started}


def jobs_named(sacct_output: str, names: set[str]) -> set[str]:
    """`sacct ... -o JobID,State,Submit,JobName` -> the jobs (array tasks by their array) whose
    name is one of `names`."""
    found = set()
    for line in sacct_output.splitlines():
        fields = line.split("|")
        if len(fields) >= 4 and fields[3].strip() in names:
            found.add(fields[0].strip().split("_")[0])
    return found


def outcomes_of(submitted: list[str], runs: dict[str, list[str]]) -> dict[str, Outcome]:
    result = {}
    for job in submitted:
        tasks = {k: v for k, v in runs.items() if k == job or ("_" not in job and k.startswith(job + "_"))}
        if len(tasks) <= 1:
            result[job] = Outcome(job, next(iter(tasks.values()), []))
            continue
        # An array: completed when every task's last run is; requeued when any task was.
        finals = [v[-1] for v in tasks.values()]
        last = next((f for f in finals if f != "COMPLETED"), "COMPLETED")
        result[job] = Outcome(job, (["REQUEUED"] if any(len(v) > 1 for v in tasks.values()) else []) + [last])
    return result


def unsettled(outcomes: dict[str, Outcome], queued: set[str]) -> dict[str, str]:
    """The jobs that may still run: not in a final state in sacct, or still in slurmctld's queue
    (its last sacct run failed but the job was requeued). job -> what holds it."""
    waiting = {}
    for job, outcome in outcomes.items():
        if job.split("_")[0] in queued:
            waiting[job] = f"{outcome.final}, still queued"
        elif outcome.final not in FINAL_STATES:
            waiting[job] = outcome.final
    return waiting


def summarize(submitted: list[str], runs: dict[str, list[str]], others: list[str] = ()) -> Summary:
    """others: jobs recorded with must_complete=False (neither lost nor unexpected)."""
    outcomes = outcomes_of(submitted, runs)
    mine = set(submitted) | set(others)
    return Summary(
        submitted=len(outcomes),
        completed=sum(1 for o in outcomes.values() if o.final == "COMPLETED"),
        requeued=sum(1 for o in outcomes.values() if o.requeued),
        lost=sorted((j for j, o in outcomes.items() if o.final != "COMPLETED"), key=_job_order),
        unexpected=sorted((j for j in runs if j not in mine and j.split("_")[0] not in mine), key=_job_order),
    )


def _job_order(job: str) -> tuple[int, str]:
    head = job.split("_")[0]
    return (int(head) if head.isdigit() else 0, job)
