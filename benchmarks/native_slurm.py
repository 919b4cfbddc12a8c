"""The native half of the Slurm-on-Kubernetes benchmark: the same Slurm topology, started natively.

A manifest (SlurmCluster + NodeSets, e.g. examples/demo.yaml) is rendered by kubeslurm
exactly as the operator renders it, and run by real slurmctld, slurmd, slurmdbd, MariaDB
and a login host with sackd, each in its own network namespace (the real-Slurm test
tier's native Slurm cluster, testbed/native_slurm; no Kubernetes). Then the job mix of
benchmarks/job_throughput.py runs as USER on the login host, like the Kubernetes half
runs it in the login pod.

    sudo .venv/bin/python benchmarks/native_slurm.py [--manifest examples/demo.yaml] [--jobs 200]

prints a JSON object. Needs root (namespaces, overlayfs); the first run builds the
cached root filesystem (debootstrap, a few minutes). Only one native Slurm cluster can run
on a machine at a time: do not run it together with the real-Slurm test tier.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a script: make `benchmarks` and `testbed` importable
    sys.path.insert(0, str(REPO))

from benchmarks.job_throughput import measure_throughput  # noqa: E402
from kubeslurm.render.config.accounting_commands import accounting_commands  # noqa: E402
from testbed import native_slurm  # noqa: E402
from testbed.native_slurm.rendered import account_users, load, native_cluster, read_documents, slurm_control  # noqa: E402


def _log(msg: str) -> None:
    print(f"native_slurm: {msg}", file=sys.stderr, flush=True)


def run_native_bench(manifest: Path, jobs: int = 200, partition: str = "cpu", user: str = "alice") -> dict:
    """Start the Slurm topology that `manifest` (SlurmCluster + NodeSets YAML, e.g. examples/demo.yaml) describes,
    natively: the rendered configs of kubeslurm on real daemons in network namespaces (testbed/native_slurm
    NativeSlurmCluster, with a login host running sackd). Returns
    {"start_to_idle_s": float,   # from starting the daemons (after the rootfs is available) to every node idle in sinfo
     "timings": {...},           # seconds from that start to each daemon up (mariadb, slurmdbd, slurmctld, ...)
     "jobs": int, "throughput_jobs_per_s": float, "jobs_completed": int}  # jobs COMPLETED per sacct
    and always stops the cluster."""
    model, node_sets = load(read_documents(manifest))
    if not model.spec.accounting.enabled:
        raise ValueError(f"{manifest}: the benchmark counts completions with sacct; it needs accounting.enabled")
    if user not in account_users(model):
        raise ValueError(f"{manifest}: user {user!r} is in no account of spec.accounts {account_users(model)}")
    if partition not in {p.name for p in model.spec.partitions}:
        raise ValueError(f"{manifest}: no partition {partition!r}")

    rootfs = native_slurm.build_rootfs()  # cached after the first run
    cluster = native_cluster(rootfs, model, node_sets, name="bench")
    try:
        _log(f"starting {model.metadata.name}: {len(cluster.nodes)} nodes"
             f" ({', '.join(n.name for n in cluster.nodes)}), login, slurmdbd, MariaDB")
        cluster.start()
        # Measured by NativeSlurmCluster from the start of the hosts (its t0) to every node idle in sinfo.
        start_to_idle = cluster.timings["nodes_idle"]
        _log("up: " + ", ".join(f"{k} {v:.1f}s" for k, v in cluster.timings.items()))
        # The operator's step before users can submit: the accounts of spec.accounts.
        slurm_control(cluster).sacctmgr(accounting_commands(model))

        def run(script: str, timeout: float) -> str:
            return cluster.run(cluster.login_host, ["/bin/sh", "-c", script], user=user,
                               timeout=timeout).stdout

        result = {"throughput_jobs_per_s": None, "jobs_completed": 0}
        if jobs:  # 0: only the start is measured
            _log(f"submitting {jobs} jobs to partition {partition} as {user}")
            result = measure_throughput(run, jobs, partition)
            _log(f"jobs {result['first_job']}..{result['last_job']} done in {result['wall_s']:.1f}s,"
                 f" {result['jobs_completed']} COMPLETED per sacct")
    finally:
        t = time.monotonic()
        cluster.stop()
        _log(f"stopped in {time.monotonic() - t:.1f}s")
    return {"start_to_idle_s": start_to_idle, "timings": dict(cluster.timings), "jobs": jobs,
            "throughput_jobs_per_s": result["throughput_jobs_per_s"],
            "jobs_completed": result["jobs_completed"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, default=REPO / "examples/demo.yaml")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--partition", default="cpu")
    ap.add_argument("--user", default="alice")
    args = ap.parse_args(argv)
    result = run_native_bench(args.manifest, jobs=args.jobs, partition=args.partition, user=args.user)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
