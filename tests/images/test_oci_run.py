"""The Slurm image's oci-run (oci.conf's RunTimeRun) running crun for real, without Slurm or
Kubernetes: the image in a private containerd, fake GPU device files bound in at /dev/nvidia0-3,
and, as an unprivileged user, a bundle unpacked with umoci and the config.json slurmstepd would
write for a step (its process.env holding the step's SLURM_STEP_GPUS). The container sees the
step's GPUs and no others; a GPU list that is not digits and commas refuses the step.

A faster rung than the e2e tier (tests/e2e/test_containers.py), where Slurm itself calls oci-run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from images.build import IMAGES, build_rootfs
from testbed.oci_image import IMAGE_TAG, write_oci_layout

from tests.images.conftest import REPO

pytestmark = pytest.mark.images

GPUS = 4
USER = 1000
# Run by python3 as root in the Slurm image's container: a bundle unpacked as USER, then per case
# a task spool directory with the config.json Slurm writes there (root.path absolute, the step's
# environment in process.env, the command in process.args) and oci-run called as USER, as
# slurmstepd calls it. One JSON line per case. Arguments: the cases, USER, the image's tag.
CASES = r'''
import json, os, subprocess, sys

USER, TAG = int(sys.argv[2]), sys.argv[3]

def as_user(*argv):
    return subprocess.run(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--", *argv],
                          env={"HOME": "/work", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, cwd="/work",
                          capture_output=True, text=True, timeout=120)

os.makedirs("/work", exist_ok=True)
os.chown("/work", USER, USER)
unpacked = as_user("umoci", "unpack", "--rootless", "--image", f"/layout:{TAG}", "/work/bundle")
if unpacked.returncode:
    sys.exit(f"umoci unpack: {unpacked.stdout}{unpacked.stderr}")
with open("/work/bundle/config.json") as f:
    bundle = json.load(f)
for name, gpus in json.loads(sys.argv[1]):
    spool = f"/work/spool-{name}"
    as_user("mkdir", "-p", spool)
    config = json.loads(json.dumps(bundle))
    config["root"]["path"] = "/work/bundle/rootfs"
    config["process"]["terminal"] = False
    config["process"]["env"] = [e for e in config["process"].get("env", []) if not e.startswith("SLURM_")]
    config["process"]["env"] += [f"SLURM_STEP_GPUS={gpus}", "SLURM_JOB_GPUS=0,1,2,3"]
    config["process"]["args"] = ["/bin/sh", "-c", 'for f in /dev/nvidia*; do [ -c "$f" ] && echo "$f"; done; true']
    with open(f"{spool}/config.json", "w") as f:
        json.dump(config, f)
    os.chmod(f"{spool}/config.json", 0o644)
    run = as_user("/usr/libexec/kubeslurm/oci-run", spool, f"node-0.user.7.0.{name}")
    print(json.dumps({"case": name, "rc": run.returncode, "devices": run.stdout.split(), "stderr": run.stderr}))
'''


@pytest.fixture
def layout(tmp_path) -> Path:
    """The OCI image layout of tests/e2e/test_containers.py, world-readable for USER."""
    write_oci_layout(build_rootfs(IMAGES["slurm"]), tmp_path / "layout")
    for directory, _dirs, files in os.walk(tmp_path):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)
    return tmp_path / "layout"


def test_a_container_step_gets_exactly_its_gpus_from_oci_run(containerd, images, layout, tmp_path):
    subprocess.run(["bash", str(REPO / "images/load.sh"), "--address", containerd.address, str(images["slurm"].path)],
                   check=True, capture_output=True, timeout=600)
    devices = tmp_path / "devices"
    devices.mkdir()
    mounts = []
    for n in range(GPUS):
        os.mknod(devices / f"nvidia{n}", 0o666 | 0o020000, os.makedev(195, n))  # S_IFCHR, NVIDIA's major
        mounts += ["--mount", f"type=bind,src={devices}/nvidia{n},dst=/dev/nvidia{n},options=rbind:rw"]
    (tmp_path / "cases.py").write_text(CASES)
    cases = [("0", "1"), ("1", "0,2"), ("2", ""), ("3", "1;touch /tmp/x"), ("4", "9")]
    p = containerd.ctr("run", "--rm", *mounts,
                       # the cgroup mount a pod has (crun refuses to run without one, even managing none)
                       "--mount", "type=cgroup,src=cgroup,dst=/sys/fs/cgroup,options=nosuid:noexec:nodev:relatime:ro",
                       "--mount", f"type=bind,src={layout},dst=/layout,options=rbind:ro",
                       "--mount", f"type=bind,src={tmp_path}/cases.py,dst=/cases.py,options=rbind:ro",
                       images["slurm"].tags[0], f"ksl-oci-run-{os.getpid()}",
                       "python3", "/cases.py", json.dumps(cases), str(USER), IMAGE_TAG, timeout=300)
    results = {r["case"]: r for r in map(json.loads, p.stdout.splitlines())}
    assert set(results) == {name for name, _ in cases}, p.stdout + p.stderr
    seen = {name: (r["rc"], r["devices"]) for name, r in results.items()}
    assert seen["0"] == (0, ["/dev/nvidia1"]), results["0"]  # one of four
    assert seen["1"] == (0, ["/dev/nvidia0", "/dev/nvidia2"]), results["1"]
    assert seen["2"] == (0, []), results["2"]  # a step given no GPU: none, though the job has four
    assert seen["3"] == (1, []) and "not a list of GPU numbers" in results["3"]["stderr"], results["3"]
    assert seen["4"] == (1, []) and "/dev/nvidia9, which this node does not have" in results["4"]["stderr"], results["4"]
