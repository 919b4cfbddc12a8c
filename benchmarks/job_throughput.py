"""The job mix of the Slurm-on-Kubernetes vs. native Slurm benchmark, shared by both halves.

Both halves run the very same /bin/sh scripts as the same user on a login host (a
login pod in Kubernetes, the native Slurm cluster's login host), so the only
difference is where Slurm runs:

- `submit_script(jobs, partition)`: submits JOBS trivial batch jobs as fast as one
  sbatch after another goes, waits until none of the user's jobs is left in the queue,
  and prints `FIRST_JOB_ID LAST_JOB_ID`. Throughput = jobs / its wall time.
- `count_completed_script(first, last)`: prints how many of those jobs sacct records
  as COMPLETED.

`measure_throughput(run, jobs, partition)` does the whole measurement given a way to
run a script on the login host; `wait_completed` retries the sacct count until
slurmdbd has received every record (or the count stops changing).
"""

from __future__ import annotations

import shlex
import time
from typing import Callable

# How long a number of completions may stay unchanged before wait_completed believes it.
SETTLE_S = 5.0


def submit_script(jobs: int, partition: str) -> str:
    """/bin/sh script, run as the user on a login host: submits JOBS trivial batch jobs
    (`sbatch --parsable -p PARTITION --wrap true -o /dev/null`) back to back, waits
    until none of the user's jobs is pending or running (squeue every 0.5 s), then
    prints one line `FIRST_JOB_ID LAST_JOB_ID`. Exits non-zero when an sbatch keeps
    failing (3 tries, 1 s apart)."""
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    part = shlex.quote(partition)
    return f"""\
set -eu
me=${{USER:-$(id -un)}}
first= last= i=0
while [ "$i" -lt {int(jobs)} ]; do
  tries=0
  until id=$(sbatch --parsable -p {part} --wrap true -o /dev/null); do
    tries=$((tries + 1))
    if [ "$tries" -ge 3 ]; then echo "sbatch failed $tries times (job $i)" >&2; exit 1; fi
    sleep 1
  done
  id=${{id%%;*}}
  [ -n "$first" ] || first=$id
  last=$id
  i=$((i + 1))
done
while :; do
  # A failed squeue (a timeout under load) must not look like an empty queue.
  queued=$(squeue -h -u "$me" -o %i) || {{ sleep 0.5; continue; }}
  [ -n "$queued" ] || break
  sleep 0.5
done
echo "$first $last"
"""


def count_completed_script(first: int, last: int) -> str:
    """/bin/sh script: prints the number of jobs FIRST..LAST that sacct records as
    COMPLETED (any user: -a; from the epoch on: -S, so midnight does not matter)."""
    first, last = int(first), int(last)
    if last < first:
        raise ValueError(f"last job id {last} < first {first}")
    return f"""\
set -eu
ids=$(seq -s, {first} {last})
sacct -a -X -n -P -S 1970-01-01T00:00:00 -j "$ids" -o JobIDRaw,State |
  awk -F'|' '$1 >= {first} && $1 <= {last} && $2 == "COMPLETED" {{ n++ }} END {{ print n + 0 }}'
"""


def parse_job_range(output: str) -> tuple[int, int]:
    """(first, last) from submit_script's output (its last non-empty line)."""
    line = [x for x in output.strip().splitlines() if x.strip()][-1]
    first, last = line.split()
    return int(first), int(last)


Runner = Callable[[str, float], str]  # (sh script, timeout in s) -> its stdout; raises on failure


def wait_completed(run: Runner, first: int, last: int, jobs: int, timeout: float = 60.0) -> int:
    """The number of COMPLETED jobs FIRST..LAST per sacct, once slurmdbd has them all:
    retries until it equals JOBS, or has not changed for SETTLE_S, or TIMEOUT passed."""
    script = count_completed_script(first, last)
    deadline = time.monotonic() + timeout
    count, since = -1, time.monotonic()
    while True:
        now_count = int(run(script, 60).strip().splitlines()[-1])
        if now_count != count:
            count, since = now_count, time.monotonic()
        if count >= jobs or time.monotonic() - since >= SETTLE_S or time.monotonic() > deadline:
            return count
        time.sleep(1)


def measure_throughput(run: Runner, jobs: int, partition: str) -> dict:
    """Runs submit_script through RUN (as the user, on a login host), timed, then counts
    the completions. Returns {"jobs", "throughput_jobs_per_s", "jobs_completed",
    "first_job", "last_job", "wall_s"}."""
    script = submit_script(jobs, partition)
    t0 = time.monotonic()
    out = run(script, max(300.0, 5.0 * jobs))
    wall = time.monotonic() - t0
    first, last = parse_job_range(out)
    completed = wait_completed(run, first, last, jobs)
    return {"jobs": jobs, "throughput_jobs_per_s": jobs / wall, "jobs_completed": completed,
            "first_job": first, "last_job": last, "wall_s": wall}
