#!/usr/bin/python3
"""oci-run BUNDLE CONTAINER_ID: oci.conf's RunTimeRun (spec.slurm.containers), installed by
images/slurm/setup.sh as /usr/libexec/kubeslurm/oci-run.

slurmstepd calls it as the job's user with the step's bundle (%b: the task's spool directory,
where Slurm wrote the config.json it made from the user's bundle, its process.env replaced by
the step's final environment) and the container id (%n.%u.%j.%s.%t). It runs crun rootless on
a copy of that config.json fitted to a pod:

- /proc: in a pod the container runtime masks parts of /proc (kcore, keys, sysrq-trigger, ...
  with mounts over them), and the kernel lets a user namespace mount a new proc only where no
  part of /proc is covered: crun's `mount proc` fails with EPERM. So the container stays in the
  step's PID namespace and gets the step's /proc bound recursively, masks included.
- Host name: the container stays in the step's UTS namespace, so it is the Slurm node's name
  (`hostname`, what MPI and NCCL exchange), not the bundle's (umoci writes "umoci-default").
- GPUs: the device files of exactly the GPUs Slurm gave the step are bound in at the same path
  (/dev/nvidiaN), with NVIDIA's control devices when the node has them; any /dev/nvidia* the
  bundle names itself is dropped. Which GPUs comes from Slurm's variables in the step's
  environment: SLURM_STEP_GPUS for a step (SLURM_JOB_GPUS for the batch and interactive steps),
  the numbers of the /dev/nvidiaN files gres.conf lists, not CUDA_VISIBLE_DEVICES (with
  ConstrainDevices that counts from 0 among the allowed devices). Values are digits and commas
  or the step fails; paths are built from the numbers, never taken from the environment.
  The binds are made with the user's own rights (rootless): they follow the allocation, while
  what keeps a job from the other GPUs is Slurm's device cgroup (spec.slurm.constrainWithCgroups).

The copy is private to the user and removed afterwards; crun gets argv, no shell.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

# The step ids Slurm prints for %s in place of a number (slurm.h: SLURM_BATCH_SCRIPT,
# SLURM_INTERACTIVE_STEP): these steps carry the job's GPUs in SLURM_JOB_GPUS.
JOB_STEPS = {4294967291: "batch", 4294967290: "interactive"}
GPU_NUMBERS = re.compile(r"[0-9]{1,5}(,[0-9]{1,5})*")
CONTAINER_ID = re.compile(r"(?P<node_user>.+)\.(?P<job>[0-9]+)\.(?P<step>[0-9]+)\.(?P<task>[0-9]+)")
NVIDIA_DEVICE = re.compile(r"/dev/nvidia")
# Not GPUs, but CUDA opens them beside /dev/nvidiaN (what NVIDIA's container toolkit binds too).
NVIDIA_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# Namespaces a container step shares with its step (see the module docstring).
STEP_NAMESPACES = ("pid", "uts")
PROC = {"destination": "/proc", "type": "bind", "source": "/proc", "options": ["rbind", "nosuid", "nodev", "noexec"]}


class StepRefused(Exception):
    """The step's GPUs cannot be told apart safely; the message says why."""


def step_of(container_id: str) -> int:
    match = CONTAINER_ID.fullmatch(container_id)
    if not match:
        raise StepRefused(f"container id {container_id!r} is not NODE.USER.JOB.STEP.TASK (oci.conf's RunTimeRun)")
    return int(match["step"])


def step_environment(config: dict) -> dict[str, str]:
    """NAME=VALUE entries of process.env, where Slurm wrote the step's environment."""
    entries = (config.get("process") or {}).get("env") or []
    return dict(entry.split("=", 1) for entry in entries if isinstance(entry, str) and "=" in entry)


def allocated_gpus(environment: dict[str, str], step: int) -> list[int]:
    """The numbers N of the /dev/nvidiaN the step was given (none when Slurm set no variable)."""
    name = "SLURM_JOB_GPUS" if step in JOB_STEPS else "SLURM_STEP_GPUS"
    value = environment.get(name)
    if value is None or value == "":
        return []
    if not GPU_NUMBERS.fullmatch(value):
        raise StepRefused(f"{name}={value!r} is not a list of GPU numbers (digits and commas); "
                          "oci-run binds /dev/nvidiaN by number only")
    return sorted({int(number) for number in value.split(",")})


def gpu_mounts(gpus: list[int], exists=os.path.exists) -> list[dict]:
    """Bind mounts of the GPUs' device files and of the control devices the node has."""
    if not gpus:
        return []
    missing = [f"/dev/nvidia{n}" for n in gpus if not exists(f"/dev/nvidia{n}")]
    if missing:
        raise StepRefused(f"Slurm gave this step {', '.join(missing)}, which this node does not have")
    paths = [f"/dev/nvidia{n}" for n in gpus] + [p for p in NVIDIA_CONTROL_DEVICES if exists(p)]
    return [{"destination": p, "type": "bind", "source": p, "options": ["bind", "nosuid", "noexec"]} for p in paths]


def fitted_config(config: dict, container_id: str, exists=os.path.exists) -> dict:
    """config.json as crun should run it in a pod: the step's /proc, PID and UTS namespaces,
    the step's GPUs and no other /dev/nvidia*."""
    gpus = allocated_gpus(step_environment(config), step_of(container_id))
    fitted = json.loads(json.dumps(config))
    linux = fitted.setdefault("linux", {})
    linux["namespaces"] = [ns for ns in linux.get("namespaces", []) if ns.get("type") not in STEP_NAMESPACES]
    fitted.pop("hostname", None)  # crun sets one only in a UTS namespace of its own
    if "devices" in linux:
        linux["devices"] = [d for d in linux["devices"] if not NVIDIA_DEVICE.match(str(d.get("path", "")))]
    mounts = [PROC if m.get("destination") == "/proc" else m for m in fitted.get("mounts", [])
              if not NVIDIA_DEVICE.match(str(m.get("destination", ""))) and not NVIDIA_DEVICE.match(str(m.get("source", "")))]
    fitted["mounts"] = mounts + gpu_mounts(gpus, exists)
    return fitted


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: oci-run BUNDLE CONTAINER_ID", file=sys.stderr)
        return 2
    bundle, container_id = argv[1], argv[2]
    with open(os.path.join(bundle, "config.json")) as f:
        config = json.load(f)
    try:
        config = fitted_config(config, container_id)
    except StepRefused as refused:
        print(f"oci-run: {refused}", file=sys.stderr)
        return 1
    fd, path = tempfile.mkstemp(prefix="kubeslurm-oci-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        crun = ["crun", "--rootless=true", "--cgroup-manager=disabled", f"--root=/tmp/kubeslurm-crun-{os.getuid()}"]
        return subprocess.run([*crun, "run", "--bundle", bundle, "--config", path, container_id]).returncode
    finally:
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
