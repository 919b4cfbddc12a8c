"""The soak (issue 17, item 9; `make soak`): mixed jobs -- 1-node, multi-node, GPU, arrays -- for
KUBESLURM_SOAK_MINUTES (30 by default), with a fault from tests/faults/injectors.py injected at
random every KUBESLURM_SOAK_FAULT_EVERY seconds (240). After each fault the cluster is waited for
(its recovery time printed); at the end every job is COMPLETED, requeued and then COMPLETED, and
the ledger matches sacct one to one. KUBESLURM_SOAK_SEED repeats a run's choice of faults.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from testbed import deployment
from testbed.job_ledger import JobStream
from tests.faults.conftest import CLUSTER, NAMESPACE
from tests.faults.injectors import soak_faults

pytestmark = pytest.mark.soak

MIXED_JOBS = [
    "-p cpu --wrap 'sleep 10'",                              # 1 node
    "-p cpu -N2 --wrap 'srun hostname >/dev/null; sleep 8'",  # 2 nodes
    "-p gpu --gres=gpu:1 --wrap 'sleep 8'",                  # a GPU
    "-p cpu,gpu --array=0-3 --wrap 'sleep 4'",               # an array of 4
    "-p gpu,cpu --wrap 'sleep 2'",
]


def test_soak(bed, kube):
    minutes = float(os.environ.get("KUBESLURM_SOAK_MINUTES", "30"))
    every = float(os.environ.get("KUBESLURM_SOAK_FAULT_EVERY", "240"))
    seed = int(os.environ.get("KUBESLURM_SOAK_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    _client, local = kube
    local_cluster = None
    if local:
        from testbed.local_cluster import LocalCluster
        local_cluster = LocalCluster(verbose=False)
    menu = soak_faults(bed, local_cluster)
    print(f"\nsoak: {minutes:g} min, a fault every {every:g} s, seed {seed}; faults: {', '.join(menu)}", flush=True)
    end = time.monotonic() + minutes * 60
    injected = []
    with JobStream(bed.ledger, MIXED_JOBS, every=8, submit=bed.sbatch) as stream:
        next_fault = time.monotonic() + min(every, minutes * 60 / 2)
        while time.monotonic() < end:
            time.sleep(max(0.0, min(next_fault, end) - time.monotonic()))
            if time.monotonic() >= end:
                break
            name = rng.choice(sorted(menu))
            t0 = time.monotonic()
            what = menu[name](rng)
            deployment.wait_usable(bed.kube, NAMESPACE, CLUSTER, 900, report=lambda line: None)
            recovered = time.monotonic() - t0
            injected.append((name, recovered))
            print(f"soak [{(time.monotonic() - end) / 60 + minutes:5.1f} min] {what}; cluster usable again after "
                  f"{recovered:.0f} s; jobs submitted so far {len(bed.ledger.submitted)}", flush=True)
            next_fault = time.monotonic() + every
    print(f"soak: {len(injected)} faults: " + ", ".join(f"{n} ({s:.0f} s)" for n, s in injected)
          + f"; sbatch refused while a fault was in: {stream.refused}", flush=True)
    assert injected, "no fault was injected: make the soak longer than one fault interval"
    bed.settle_and_report(f"the soak ({minutes:g} min, seed {seed})", timeout=1200)
