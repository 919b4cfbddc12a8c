"""The native Slurm cluster itself (testbed/native_slurm), with a small hand-written config: 3 dynamic configless
nodes (2 with fake GPUs), auth/slurm, Nodeset partitions, slurmdbd + MariaDB."""

from __future__ import annotations

import os
import re

import pytest

from testbed.native_slurm import NodeSpec

pytestmark = pytest.mark.slurm

SLURM_CONF = """\
ClusterName=smoke
SlurmctldHost=smoke-controller-0(smoke-controller)
SlurmctldParameters=enable_configless
AuthType=auth/slurm
CredType=cred/slurm
SlurmUser=slurm
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
TreeWidth=65533
MaxNodeCount=64
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
# Debian's minbase has no mailer; an unset MailProg logs an error at every start.
MailProg=/bin/true
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=smoke-slurmdbd
AccountingStorageTRES=gres/gpu
NodeSet=gpu Feature=gpu
NodeSet=cpu Feature=cpu
PartitionName=gpu Nodes=gpu Default=YES MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=cpu Default=NO MaxTime=INFINITE State=UP
"""

GRES_CONF = """\
NodeName=gpu-[0-1] AutoDetect=off Name=gpu File=/dev/nvidia[0-1]
"""

CGROUP_CONF = "CgroupPlugin=disabled\n"

SLURMDBD_CONF = """\
AuthType=auth/slurm
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=smoke-mariadb
StoragePort=3306
StorageUser=slurm
StoragePass=not-a-secret-test-only
StorageLoc=slurm_acct_db
"""


@pytest.fixture
def cluster(native_slurm_cluster):
    return native_slurm_cluster(
        configs={"slurm.conf": SLURM_CONF, "gres.conf": GRES_CONF,
                 "cgroup.conf": CGROUP_CONF, "slurmdbd.conf": SLURMDBD_CONF},
        auth_key=os.urandom(64),
        nodes=[NodeSpec("gpu-0", "CPUs=2 RealMemory=1000 Features=gpu Gres=gpu:2", gpus=2),
               NodeSpec("gpu-1", "CPUs=2 RealMemory=1000 Features=gpu Gres=gpu:2", gpus=2),
               NodeSpec("cpu-0", "CPUs=2 RealMemory=1000 Features=cpu")],
        users=["alice"],
        login=True,
    )


def test_jobs_run_with_gpus_and_are_accounted(cluster):
    c = cluster
    print("start timings:", {k: round(v, 1) for k, v in c.timings.items()})
    info = c.run("login", "sinfo -h -o '%P %D %T %G'", user="alice").stdout
    assert re.search(r"^gpu\* 2 idle gpu:2", info, re.M), info
    assert re.search(r"^cpu 1 idle", info, re.M), info

    # srun from the login host (sackd) across both GPU nodes
    out = c.run("login", "srun -N2 -p gpu hostname | sort", user="alice").stdout.split()
    assert out == ["gpu-0", "gpu-1"]

    # 2 fake GPUs: two distinct device indices
    cvd = c.run("login", "srun -p gpu --gres=gpu:2 printenv CUDA_VISIBLE_DEVICES",
                user="alice").stdout.strip()
    assert sorted(cvd.split(",")) == ["0", "1"], cvd

    # sbatch on the cpu Nodeset partition, output in the user's home on the node
    p = c.run("login", "sbatch --parsable -p cpu -o /tmp/job-%j.out --wrap 'id -un; hostname'",
              user="alice")
    job = p.stdout.strip().split(";")[0]
    assert c.wait_job(job, 60) == "COMPLETED"
    assert c.run("cpu-0", f"cat /tmp/job-{job}.out").stdout.split() == ["alice", "cpu-0"]

    # accounting: the batch job is in slurmdbd
    def acct():
        return c.run("login", f"sacct -n -P -X -j {job} -o JobID,User,State,NodeList",
                     user="alice").stdout.strip()
    c._wait(lambda: "COMPLETED" in acct(), 30, f"job {job} in sacct", ["slurmdbd"])
    assert acct() == f"{job}|alice|COMPLETED|cpu-0"
    gpu_jobs = c.run(c.controller, "sacct -n -P -X -a -o User,AllocTRES -S now-1hour").stdout
    assert "gres/gpu=2" in gpu_jobs, gpu_jobs
