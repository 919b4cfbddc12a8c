"""Jobs in containers, end to end: a researcher unpacks an image into a bundle on her shared
home and runs it as a job step with `srun --container` / `sbatch --container`, as herself.

Its own SlurmCluster (`examples/demo.yaml`'s cpu NodeSet and shared home, with
`spec.slurm.containers: true`) in its own namespace, so it runs beside or without the story.
The slurmd pods are not privileged: the only grant is seccomp Unconfined on the slurmd
container, which the test reads back from the pod.
"""

from __future__ import annotations

import re

import pytest

from images.build import IMAGES, build_rootfs
from testbed.oci_image import IMAGE_ID, IMAGE_TAG, write_oci_layout
from testbed.waiting import wait_for

from .workload_clusters import demo_variant

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-containers"


def _containers_on_cpu_only(documents: list[dict]) -> list[dict]:
    for document in documents:
        if document["kind"] == "SlurmCluster":
            document["spec"]["slurm"]["containers"] = True
            document["spec"]["partitions"] = [{"name": "cpu", "nodeSets": ["cpu"], "default": True}]
    return [d for d in documents if d["kind"] != "NodeSet" or d["metadata"]["name"] == "cpu"]


@pytest.fixture(scope="module")
def login(kube, operator):
    client, _local = kube
    with demo_variant(client, NAMESPACE, _containers_on_cpu_only) as researcher:
        yield researcher


def test_slurmd_pods_run_unprivileged_with_only_seccomp_lifted(login):
    pod = login.pod("cpu-0")
    slurmd = next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")
    assert slurmd["securityContext"] == {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}}
    status = login.kube.exec(NAMESPACE, "cpu-0", "slurmd", ["grep", "-E", "^(CapEff|Seccomp):", "/proc/1/status"]).stdout
    assert re.search(r"^Seccomp:\s+0$", status, re.M), status
    assert not re.search(r"^CapEff:\s+000001ffffffffff$", status, re.M), status  # not every capability


def test_a_researcher_runs_her_image_as_a_job_step_as_herself(login, tmp_path):
    """The image (made here: testbed/oci_image.py) goes to alice's home as an OCI layout;
    she unpacks it rootless with umoci and runs it through Slurm."""
    rootfs = build_rootfs(IMAGES["slurm"])
    write_oci_layout(rootfs, tmp_path / "image")
    login.put_tree(tmp_path / "image", "~/images/job-image")
    login.sh(f"rm -rf ~/bundle && umoci unpack --rootless --image ~/images/job-image:{IMAGE_TAG} ~/bundle")
    uid = login.sh("id -u").strip()

    out = login.sh("srun -p cpu --container=$HOME/bundle /bin/sh -c "
                   "'. /etc/os-release; echo image=$ID; echo host=$(cat /proc/sys/kernel/hostname); "
                   "echo outside_uid=$(cat /proc/self/uid_map)'")
    assert f"image={IMAGE_ID}" in out, out
    assert "host=cpu-0" in out, out
    # crun maps her uid (and only hers) into the container: she is nobody else on the node
    mapping = re.search(r"outside_uid=\s*(\d+)\s+(\d+)\s+(\d+)", out)
    assert mapping and mapping.group(2) == uid and mapping.group(3) == "1", out

    # a batch job whose step runs in the container; its output is read back in the login pod
    job = login.sh("sbatch --parsable -p cpu --container=$HOME/bundle -o $HOME/container-%j.out "
                   "--wrap '. /etc/os-release; echo image=$ID'").strip().splitlines()[-1]

    def ended():
        state = re.search(r"JobState=(\S+)", login.sh(f"scontrol show job {job} --oneliner")).group(1)
        return state if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") else None

    assert wait_for(ended, 180, f"container batch job {job} ended", interval=2) == "COMPLETED"
    assert login.sh(f"cat ~/container-{job}.out").strip().endswith(f"image={IMAGE_ID}")
    assert login.sh(f"stat -c %u ~/container-{job}.out").strip() == uid
    # the node's own root is Debian's, not the image's
    assert "ID=debian" in login.sh("srun -p cpu cat /etc/os-release")


# -- peers by name: what MPI and NCCL look up out of band ---------------------------------


def test_nodes_resolve_each_other_by_slurm_node_name(login):
    """A 2-node job's tasks resolve both nodes by their Slurm names (`scontrol show hostnames`),
    to the pods' addresses; `<pod>.<nodeset>` resolves too."""
    login.kube.run("scale", "nodeset", "cpu", "--replicas=2", "-n", NAMESPACE)

    def both_idle():
        out = login.sh("sinfo -h -N -p cpu -o '%N %t'")
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return states.get("cpu-0") == "idle" and states.get("cpu-1") == "idle"

    wait_for(both_idle, 300, "cpu-0 and cpu-1 idle", interval=3)
    addresses = {name: login.pod(name)["status"]["podIP"] for name in ("cpu-0", "cpu-1")}
    out = login.sh("srun -p cpu -N2 --ntasks-per-node=1 sh -c 'for n in $(scontrol show hostnames $SLURM_JOB_NODELIST); "
                   "do echo \"$(hostname) $n $(getent hosts $n | cut -d\" \" -f1) $(getent hosts $n.cpu | cut -d\" \" -f1)\"; done'")
    seen = sorted(line.split() for line in out.splitlines() if line.strip())
    assert seen == sorted([task, peer, addresses[peer], addresses[peer]]
                          for task in ("cpu-0", "cpu-1") for peer in ("cpu-0", "cpu-1")), out
