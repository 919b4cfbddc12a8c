"""Jobs in containers, end to end: a researcher unpacks an image into a bundle on her shared
home and runs it as a job step with `srun --container` / `sbatch --container`, as herself.

Its own SlurmCluster (`examples/demo.yaml`'s cpu NodeSet and shared home, with
`spec.slurm.containers: true`) in its own namespace, so it runs beside or without the story.
The slurmd pods are not privileged: the only grant is seccomp Unconfined on the slurmd
container, which the test reads back from the pod.
"""

from __future__ import annotations

import base64
import io
import re
import tarfile

import pytest
import yaml

from images.build import IMAGES, build_rootfs
from testbed import deployment
from testbed.deployment import ROOT
from testbed.kubectl import Kube
from testbed.oci_image import IMAGE_ID, IMAGE_TAG, write_oci_layout
from testbed.waiting import wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-containers"
CLUSTER = "research"
LOGIN = f"{CLUSTER}-login-0"
READY_TIMEOUT = 900


class Login:
    def __init__(self, kube: Kube):
        self.kube = kube

    def sh(self, script: str, user: str = "alice", check: bool = True) -> str:
        result = self.kube.exec(NAMESPACE, LOGIN, "login", ["runuser", "-l", user, "-c", script], check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{user}$ {script}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def put_tree(self, directory, into: str, user: str = "alice") -> None:
        """Copies a local directory into the pod as user (a tar over stdin, as data)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(directory), arcname=".")
        self.kube.run("exec", "-i", "-n", NAMESPACE, LOGIN, "-c", "login", "--", "runuser", "-u", user, "--",
                      "sh", "-c", f"mkdir -p {into} && base64 -d | tar -x -C {into}",
                      input=base64.b64encode(buffer.getvalue()).decode())


@pytest.fixture(scope="module")
def login(kube, operator):
    client, _local = kube
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=300s")
    client.ensure_namespace(NAMESPACE)
    documents = [d for d in yaml.safe_load_all((ROOT / "examples" / "demo.yaml").read_text()) if d]
    kept = []
    for document in documents:
        document["metadata"]["namespace"] = NAMESPACE
        if document["kind"] == "SlurmCluster":
            document["spec"]["slurm"]["containers"] = True
            document["spec"]["partitions"] = [{"name": "cpu", "nodeSets": ["cpu"], "default": True}]
        if document["kind"] == "NodeSet" and document["metadata"]["name"] != "cpu":
            continue
        kept.append(document)
    client.apply("\n---\n".join(yaml.safe_dump(d) for d in kept))
    deployment.wait_usable(client, NAMESPACE, CLUSTER, READY_TIMEOUT, report=lambda line: print(line, flush=True))
    yield Login(client)
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)


def test_slurmd_pods_run_unprivileged_with_only_seccomp_lifted(login):
    pod = login.kube.get("pod", "cpu-0", "-n", NAMESPACE)
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
