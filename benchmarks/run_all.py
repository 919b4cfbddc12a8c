"""`make bench`: every benchmark, one table.

    python benchmarks/run_all.py [--jobs 200] [--skip render|cluster|scale ...]

Runs each part in its own process (render_bench.py, cluster_bench.py, scale_bench.py, each
with --json), whatever the others gave, and prints one table of every figure: its target,
kubeslurm's value, the reference it is compared with, the ratio, and whether it is met.
Exits 1 only when a part could not be measured (it crashed or printed no figures); a missed
target is a NO in the table, not an error.

The parts that run Slurm or Kubernetes hold this machine's locks while they run (the local
cluster's for cluster_bench, the native Slurm harness's for scale_bench), so other sessions'
tests on the same machine are not disturbed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.figures import Figure, load, table  # noqa: E402

LOCAL_CLUSTER_LOCK = "/run/kubeslurm-local-cluster.lock"
NATIVE_SLURM_LOCK = "/run/kubeslurm-native-slurm.lock"


def parts(jobs: int, scale_nodes: int) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "render": [py, "benchmarks/render_bench.py", "--json"],
        "cluster": ["flock", LOCAL_CLUSTER_LOCK, py, "benchmarks/cluster_bench.py", "--jobs", str(jobs), "--json"],
        "scale": ["flock", NATIVE_SLURM_LOCK, py, "benchmarks/scale_bench.py", "--nodes", str(scale_nodes), "--json"],
    }


def run_part(name: str, argv: list[str]) -> list[Figure]:
    print(f"bench: {name}: {' '.join(argv)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    result = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)  # stderr: shown as it comes
    print(f"bench: {name} took {time.monotonic() - start:.0f} s (exit {result.returncode})", file=sys.stderr, flush=True)
    try:
        figures = load(result.stdout)
    except ValueError:
        return [Figure.not_measured(name, f"exit code {result.returncode}, no figures (its output is above)")]
    if result.returncode != 0:
        figures.append(Figure.not_measured(name, f"exit code {result.returncode} after these figures"))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs of the throughput figure (cluster part)")
    parser.add_argument("--scale-nodes", type=int, default=1000, help="slurmd pods of the kwok part")
    parser.add_argument("--skip", action="append", default=[], choices=("render", "cluster", "scale"))
    args = parser.parse_args(argv)
    figures: list[Figure] = []
    for name, command in parts(args.jobs, args.scale_nodes).items():
        if name not in args.skip:
            figures += run_part(name, command)
    print(table(figures))
    unmeasured = [f for f in figures if not f.measured]
    if unmeasured:
        print(f"bench: {len(unmeasured)} part(s) could not be measured", file=sys.stderr)
    return 1 if unmeasured else 0


if __name__ == "__main__":
    sys.exit(main())
