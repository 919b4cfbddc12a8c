"""Jobs in containers, end to end: a researcher unpacks an image into a bundle on her shared
home and runs it as a job step with `srun --container` / `sbatch --container`, as herself.

Its own SlurmCluster (`examples/demo.yaml`: the cpu NodeSet, the h100 NodeSet with 2 fake GPUs
and the shared home, with `spec.slurm.containers: true`) in its own namespace, so it runs
beside or without the story. The slurmd pods are not privileged: the only grant is seccomp
Unconfined on the slurmd container, which the test reads back from the pod. A container step
given GPUs sees the device files of exactly those (the image's oci-run binds them).
"""

from __future__ import annotations

import re

import pytest

from images.build import IMAGES, build_rootfs
from testbed.oci_image import IMAGE_ID, IMAGE_TAG, write_oci_layout
from testbed.waiting import wait_for

from .workload_clusters import demo_variant, slurm_index_list

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-containers"


def _with_containers(documents: list[dict]) -> list[dict]:
    for document in documents:
        if document["kind"] == "SlurmCluster":
            document["spec"]["slurm"]["containers"] = True
    return documents


@pytest.fixture(scope="module")
def login(kube, operator):
    client, _local = kube
    with demo_variant(client, NAMESPACE, _with_containers) as researcher:
        yield researcher


@pytest.fixture(scope="module")
def bundle(login, tmp_path_factory) -> str:
    """The image (made here: testbed/oci_image.py) in alice's home as an OCI layout, unpacked
    by her, rootless, with umoci: the bundle her steps run."""
    layout = tmp_path_factory.mktemp("oci") / "image"
    write_oci_layout(build_rootfs(IMAGES["slurm"]), layout)
    login.put_tree(layout, "~/images/job-image")
    login.sh(f"rm -rf ~/bundle && umoci unpack --rootless --image ~/images/job-image:{IMAGE_TAG} ~/bundle")
    return "$HOME/bundle"


def _run_batch(login, name: str, script: str, options: str = "") -> str:
    """Submits script as alice from her home and returns its output once it COMPLETED."""
    login.write(f"~/{name}.sh", script)
    job = login.sh(f"sbatch --parsable {options} -o $HOME/{name}-%j.out ~/{name}.sh").strip().splitlines()[-1]

    def ended():
        state = re.search(r"JobState=(\S+)", login.sh(f"scontrol show job {job} --oneliner")).group(1)
        return state if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY") else None

    state = wait_for(ended, 180, f"{name} job {job} ended", interval=2)
    out = login.sh(f"cat ~/{name}-{job}.out")
    assert state == "COMPLETED", out
    return out


def test_slurmd_pods_run_unprivileged_with_only_seccomp_lifted(login):
    pod = login.pod("cpu-0")
    slurmd = next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")
    assert slurmd["securityContext"] == {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}}
    status = login.kube.exec(NAMESPACE, "cpu-0", "slurmd", ["grep", "-E", "^(CapEff|Seccomp):", "/proc/1/status"]).stdout
    assert re.search(r"^Seccomp:\s+0$", status, re.M), status
    assert not re.search(r"^CapEff:\s+000001ffffffffff$", status, re.M), status  # not every capability


def test_a_researcher_runs_her_image_as_a_job_step_as_herself(login, bundle):
    """Her image, unpacked by her, run through Slurm as a step and as a batch job."""
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
    # (the file may also hold slurmstepd's "RunTimeQuery failed" line: Slurm asks crun for the state
    # of a batch container that has already exited and been removed; README: Jobs in containers)
    assert f"image={IMAGE_ID}" in login.sh(f"cat ~/container-{job}.out").splitlines()
    assert login.sh(f"stat -c %u ~/container-{job}.out").strip() == uid
    # the node's own root is Debian's, not the image's
    assert "ID=debian" in login.sh("srun -p cpu cat /etc/os-release")


# -- GPUs inside a container step ----------------------------------------------------------

# Run in the container: the GPU device files it has, and the GPUs Slurm named to the step.
LIST_GPUS = ("echo {p}step_gpus=$SLURM_STEP_GPUS {p}job_gpus=$SLURM_JOB_GPUS {p}cuda=$CUDA_VISIBLE_DEVICES; "
             "for f in /dev/nvidia*; do [ -c \"$f\" ] && echo {p}device=$f; done; true")
# A batch job on the h100 node (2 fake GPUs): what Slurm allocated (GRES IDX), the pod's device
# files, then container steps: one given `count` GPUs, one given none.
GPU_STEPS = """#!/bin/sh
scontrol show job -d "$SLURM_JOB_ID" | grep -o 'GRES=[^ ]*IDX:[^ ]*'
for f in /dev/nvidia*; do echo node_device=$f; done
srun --gres=gpu:{count} --container={bundle} /bin/sh -c '{with_gpus}'
srun --gres=none --container={bundle} /bin/sh -c '{without}'
"""


def _values(out: str, name: str) -> set[str]:
    return {m.group(1) for m in re.finditer(rf"(?:^|\s){name}=(\S+)", out, re.M)}


def _gpu_files(paths: set[str]) -> set[str]:
    return {p for p in paths if re.fullmatch(r"/dev/nvidia[0-9]+", p)}


@pytest.mark.parametrize("count", [1, 2])
def test_a_container_step_sees_exactly_the_gpus_slurm_gave_it(login, bundle, count):
    script = GPU_STEPS.format(count=count, bundle=bundle, with_gpus=LIST_GPUS.format(p=""),
                              without=LIST_GPUS.format(p="none_"))
    out = _run_batch(login, f"container-gpus-{count}", script, f"-p gpu --gres=gpu:{count}")
    allocated = slurm_index_list(re.search(r"GRES=\S*\(IDX:([0-9,-]+)\)", out).group(1))
    node, inside = _values(out, "node_device"), _values(out, "device")
    assert _gpu_files(node) == {"/dev/nvidia0", "/dev/nvidia1"}, out  # the pod has both GPUs
    assert len(allocated) == count, out
    # exactly the allocated device files, the others of the pod not even present
    assert _gpu_files(inside) == {f"/dev/nvidia{n}" for n in allocated}, out
    assert inside - _gpu_files(inside) == node - _gpu_files(node), out  # control devices, if the node has any
    # what Slurm told the step names the same GPUs (no ConstrainDevices: CUDA counts by device number)
    told = {frozenset(slurm_index_list(v)) for v in (*_values(out, "step_gpus"), *_values(out, "cuda"))}
    assert told == {frozenset(allocated)}, out
    # a step of the same job given no GPU gets no device file
    assert not _values(out, "none_device"), out


def test_a_container_batch_job_sees_the_job_s_gpus(login, bundle):
    out = _run_batch(login, "container-batch-gpu", "#!/bin/sh\n" + LIST_GPUS.format(p=""),
                     f"-p gpu --gres=gpu:1 --container={bundle}")
    job_gpus = _values(out, "job_gpus")
    assert len(job_gpus) == 1 and len(slurm_index_list(next(iter(job_gpus)))) == 1, out
    assert _gpu_files(_values(out, "device")) == {f"/dev/nvidia{n}" for n in slurm_index_list(next(iter(job_gpus)))}, out


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
