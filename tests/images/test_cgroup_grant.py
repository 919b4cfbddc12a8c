"""What slurmd's cgroup confinement (spec.slurm.constrainWithCgroups) needs from its container,
asked of the kernel and runtime directly: the Slurm image in a private containerd (runc), with
the cgroup mount Kubernetes gives an unprivileged container (read-only) and containerd's default
seccomp profile. Slurm's cgroup plugin makes directories under its cgroup mounts and, for
ConstrainDevices on cgroup v1, writes devices.deny/devices.allow there.

- no capability added: the mount cannot be made writable (EPERM);
- a writable mount without CAP_SYS_ADMIN (what a hostPath or a runtime option could give):
  memory and cpuset limits work, the devices cgroup refuses (EPERM);
- CAP_SYS_ADMIN and a bind remount of the container's own cgroup mounts first: the mounts
  become writable and every write Slurm makes works. The least grant that could replace the
  privileged slurmd pod; not applied yet, for the e2e confinement module (tests/e2e/
  test_confinement.py) has not run with it (commit 61915b5 renders it; README, "Jobs confined
  with cgroups").
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.images.conftest import REPO

pytestmark = pytest.mark.images

# Run by python3 in the container: the cgroup writes Slurm's v1 plugin makes, one JSON line.
CGROUP_WRITES = r'''
import errno, json, os

def attempt(action):
    try:
        action()
        return "ok"
    except OSError as error:
        return errno.errorcode[error.errno]

def write(path, value):
    with open(path, "w") as f:
        f.write(value)

results = {}
for controller in ("memory", "cpuset", "devices", "freezer"):
    results[f"mkdir {controller}"] = attempt(lambda: os.makedirs(f"/sys/fs/cgroup/{controller}/slurm", exist_ok=True))
results["memory.limit_in_bytes"] = attempt(lambda: write("/sys/fs/cgroup/memory/slurm/memory.limit_in_bytes", "104857600"))
results["devices.deny"] = attempt(lambda: write("/sys/fs/cgroup/devices/slurm/devices.deny", "a"))
# /dev/null: a child may allow only what its parent, the container's own cgroup, allows
results["devices.allow"] = attempt(lambda: write("/sys/fs/cgroup/devices/slurm/devices.allow", "c 1:3 rwm"))
print(json.dumps(results))
'''
# What slurmd's container would run first: each cgroup mount point of its own made writable, then "$@".
REMOUNT_CGROUPS_THEN = (
    "set -e; "
    'while read -r _ mount_point type _; do case "$type" in cgroup|cgroup2) '
    'mount -o remount,bind,rw "$mount_point";; esac; done < /proc/self/mounts; '
    'exec "$@"'
)
CGROUP_MOUNT = "type=cgroup,src=cgroup,dst=/sys/fs/cgroup,options=nosuid:noexec:nodev:relatime:{mode}"


@pytest.fixture
def slurm_image(containerd, images):
    subprocess.run(["bash", str(REPO / "images/load.sh"), "--address", containerd.address, str(images["slurm"].path)],
                   check=True, capture_output=True, timeout=600)
    return images["slurm"].tags[0]


def _run(containerd, image, name, *options, command):
    return containerd.ctr("run", "--rm", "--seccomp", *options, image, f"ksl-cgroup-{name}-{os.getpid()}", *command,
                          timeout=120, check=False)


def _writes(p) -> dict:
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _is_cgroup_v1() -> bool:
    return any(line.split()[2] == "cgroup" for line in open("/proc/self/mounts"))


def test_what_slurmd_s_cgroup_confinement_needs_from_its_container(containerd, slurm_image):
    if not _is_cgroup_v1():
        pytest.skip("this host has no cgroup v1 controllers; the devices cgroup is then eBPF, not devices.deny")
    read_only, writable = CGROUP_MOUNT.format(mode="ro"), CGROUP_MOUNT.format(mode="rw")
    remount = ["/bin/sh", "-c", "mount -o remount,bind,rw /sys/fs/cgroup/devices"]

    refused = _run(containerd, slurm_image, "plain", "--mount", read_only, command=remount)
    assert refused.returncode != 0 and "permission denied" in refused.stderr, refused.stdout + refused.stderr

    on_writable = _writes(_run(containerd, slurm_image, "writable", "--mount", writable,
                               command=["python3", "-c", CGROUP_WRITES]))
    assert on_writable["mkdir memory"] == on_writable["memory.limit_in_bytes"] == "ok", on_writable
    assert on_writable["devices.deny"] == on_writable["devices.allow"] == "EPERM", on_writable

    granted = _writes(_run(containerd, slurm_image, "granted", "--mount", read_only,
                           "--cap-add", "CAP_SYS_ADMIN",
                           command=["/bin/sh", "-c", REMOUNT_CGROUPS_THEN, "remount", "python3", "-c", CGROUP_WRITES]))
    assert set(granted.values()) == {"ok"}, granted
