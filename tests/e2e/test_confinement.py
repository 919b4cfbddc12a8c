"""Jobs confined with cgroups (spec.slurm.constrainWithCgroups), end to end: GPUs, memory, CPUs.

Its own SlurmCluster in its own namespace: examples/demo.yaml with constrainWithCgroups and
one `h100` node holding all 8 fake GPUs of its Kubernetes node. A fake /dev/nvidiaN has no
driver behind it, so opening one the job may use fails with ENXIO, while one the job's
devices cgroup denies fails with EPERM: which GPUs a job can reach is visible without GPUs.
"""

from __future__ import annotations

import re

import pytest

from testbed.waiting import wait_for

from .workload_clusters import demo_variant

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-confinement"
GPUS = 8
# Opens every /dev/nvidiaN read-write and prints what the kernel said.
OPEN_GPUS = f"""import errno, os
for i in range({GPUS}):
    try:
        os.close(os.open(f"/dev/nvidia{{i}}", os.O_RDWR))
        print(f"nvidia{{i}} opened")
    except OSError as error:
        print(f"nvidia{{i}} {{errno.errorcode[error.errno]}}")
"""
# Touches every page of `mib` MiB, then says it survived.
EAT_MEMORY = """import sys
block = bytearray(int(sys.argv[1]) * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("survived")
"""


def _eight_gpus_confined(documents: list[dict]) -> list[dict]:
    for document in documents:
        if document["kind"] == "SlurmCluster":
            document["spec"]["slurm"]["constrainWithCgroups"] = True
            document["spec"]["partitions"] = [{"name": "gpu", "nodeSets": ["h100"], "default": True}]
        if document["kind"] == "NodeSet" and document["metadata"]["name"] == "h100":
            document["spec"]["gpus"] = {"count": GPUS, "type": "h100"}
    return [d for d in documents if d["kind"] != "NodeSet" or d["metadata"]["name"] == "h100"]


@pytest.fixture(scope="module")
def login(kube, operator):
    client, _local = kube
    with demo_variant(client, NAMESPACE, _eight_gpus_confined) as researcher:
        researcher.write("~/confine/open_gpus.py", OPEN_GPUS)
        researcher.write("~/confine/eat_memory.py", EAT_MEMORY)
        yield researcher


def _gpu_access(login, gres: str) -> dict[str, str]:
    out = login.sh(f"srun -p gpu {gres} python3 ~/confine/open_gpus.py")
    return dict(line.split() for line in out.splitlines() if line.startswith("nvidia"))


def test_slurmd_pods_are_privileged_and_slurm_uses_cgroups(login):
    pod = login.pod("h100-0")
    slurmd = next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")
    assert slurmd["securityContext"] == {"runAsUser": 0, "privileged": True}
    config = login.sh("scontrol show config")
    assert re.search(r"^ProctrackType\s*=\s*proctrack/cgroup$", config, re.M), config
    assert re.search(r"^TaskPlugin\s*=\s*task/cgroup,task/affinity$", config, re.M), config


@pytest.mark.parametrize("count", [1, 2])
def test_a_job_opens_only_the_gpus_it_was_given(login, count):
    access = _gpu_access(login, f"--gres=gpu:{count}")
    assert len(access) == GPUS, access
    given = sorted(gpu for gpu, result in access.items() if result == "ENXIO")  # reached the (missing) driver
    denied = sorted(gpu for gpu, result in access.items() if result == "EPERM")  # the devices cgroup said no
    assert len(given) == count and len(denied) == GPUS - count, access


def test_a_job_without_gpus_opens_none(login):
    access = _gpu_access(login, "")
    assert set(access.values()) == {"EPERM"}, access


def test_a_job_over_its_memory_is_killed_not_the_node(login):
    restarts = login.pod("h100-0")["status"]["containerStatuses"][0]["restartCount"]
    assert "survived" in login.sh("srun -p gpu --mem=200M python3 ~/confine/eat_memory.py 50")
    over = login.sh("sbatch --parsable -p gpu --mem=100M -o /dev/null --wrap 'srun python3 ~/confine/eat_memory.py 400'").strip()

    def ended():
        states = dict(line.split("|", 1) for line in login.sh(f"sacct -n -P -j {over} -o JobID,State").splitlines() if line)
        return states if states.get(over, "PENDING") not in ("PENDING", "RUNNING") else None

    # The step over its limit is what Slurm's OOM handling kills; the job then ends as the batch
    # script's srun reports it (OUT_OF_MEMORY or FAILED, as Slurm records the script's exit).
    states = wait_for(ended, 120, f"job {over} ended", interval=2)
    assert states.get(f"{over}.0") == "OUT_OF_MEMORY" and states[over] in ("OUT_OF_MEMORY", "FAILED"), states
    # the node and its slurmd go on: idle again, the container not restarted
    wait_for(lambda: login.sh("sinfo -h -n h100-0 -o %t").strip() == "idle", 60, "h100-0 idle again", interval=2)
    assert login.pod("h100-0")["status"]["containerStatuses"][0]["restartCount"] == restarts


def test_a_job_runs_only_on_the_cpus_it_was_given(login):
    node = login.kube.exec(NAMESPACE, "h100-0", "slurmd", ["grep", "Cpus_allowed_list", "/proc/1/status"]).stdout.split()[-1]
    job = login.sh("srun -p gpu -n1 -c1 grep Cpus_allowed_list /proc/self/status").split()[-1]
    assert _cpus(job) < _cpus(node) and len(_cpus(job)) == 1, (job, node)


def _cpus(cpu_list: str) -> set[int]:
    cpus: set[int] = set()
    for part in cpu_list.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus
