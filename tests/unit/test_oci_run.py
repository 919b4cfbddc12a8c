"""The Slurm image's oci-run (images/slurm/oci-run.py): the config.json it gives crun for a
container step, table-tested (the e2e tier runs it under Slurm with crun in a pod)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "images" / "slurm" / "oci-run.py"
_spec = importlib.util.spec_from_file_location("oci_run", SCRIPT)
oci_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oci_run)

STEP_0 = "h100-0.alice.17.0.0"
BATCH = "h100-0.alice.17.4294967291.0"
INTERACTIVE = "h100-0.alice.17.4294967290.0"
NODE_DEVICES = {f"/dev/nvidia{n}" for n in range(8)}
ON_NODE = NODE_DEVICES.__contains__


def umoci_config(*env: str, mounts: list[dict] | None = None) -> dict:
    """The parts of a `umoci unpack --rootless` config.json that oci-run reads or changes."""
    return {
        "process": {"args": ["sh"], "env": ["PATH=/usr/bin:/bin", *env]},
        "mounts": mounts if mounts is not None else [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
        ],
        "hostname": "umoci-default",
        "linux": {"namespaces": [{"type": "pid"}, {"type": "user"}, {"type": "mount"}, {"type": "uts"}]},
    }


def bound_devices(config: dict) -> list[str]:
    return [m["source"] for m in config["mounts"] if m["source"].startswith("/dev/")]


@pytest.mark.parametrize(
    "container_id,env,expected",
    [
        # a step's GPUs are SLURM_STEP_GPUS: the N of /dev/nvidiaN, whatever CUDA_VISIBLE_DEVICES counts
        (STEP_0, ["SLURM_STEP_GPUS=1", "CUDA_VISIBLE_DEVICES=0"], ["/dev/nvidia1"]),
        (STEP_0, ["SLURM_STEP_GPUS=0,1", "CUDA_VISIBLE_DEVICES=0,1"], ["/dev/nvidia0", "/dev/nvidia1"]),
        (STEP_0, ["SLURM_STEP_GPUS=7,3"], ["/dev/nvidia3", "/dev/nvidia7"]),
        # a step given no GPU gets none, even inside a job that has some
        (STEP_0, ["SLURM_JOB_GPUS=0,1"], []),
        (STEP_0, [], []),
        # the batch and interactive steps carry the job's GPUs
        (BATCH, ["SLURM_JOB_GPUS=1"], ["/dev/nvidia1"]),
        (INTERACTIVE, ["SLURM_JOB_GPUS=0,1"], ["/dev/nvidia0", "/dev/nvidia1"]),
        (BATCH, ["SLURM_STEP_GPUS=1"], []),
        # a user name with dots does not confuse the step number
        ("h100-0.a.b.17.0.0", ["SLURM_STEP_GPUS=2"], ["/dev/nvidia2"]),
    ],
)
def test_the_step_gets_exactly_its_gpus(container_id, env, expected):
    assert bound_devices(oci_run.fitted_config(umoci_config(*env), container_id, ON_NODE)) == expected


def test_gpu_binds_are_device_binds_at_the_same_path():
    config = oci_run.fitted_config(umoci_config("SLURM_STEP_GPUS=3"), STEP_0, ON_NODE)
    assert config["mounts"][-1] == {"destination": "/dev/nvidia3", "type": "bind", "source": "/dev/nvidia3",
                                    "options": ["bind", "nosuid", "noexec"]}  # no nodev: it is a device


def test_control_devices_come_along_when_the_node_has_them():
    on_node = (NODE_DEVICES | {"/dev/nvidiactl", "/dev/nvidia-uvm"}).__contains__
    config = oci_run.fitted_config(umoci_config("SLURM_STEP_GPUS=0"), STEP_0, on_node)
    assert bound_devices(config) == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    # no GPU, no control device
    assert bound_devices(oci_run.fitted_config(umoci_config(), STEP_0, on_node)) == []


def test_nvidia_devices_the_bundle_names_itself_are_dropped():
    own = [{"destination": "/dev/nvidia5", "type": "bind", "source": "/dev/nvidia5"},
           {"destination": "/gpu", "type": "bind", "source": "/dev/nvidia6"}]
    config = umoci_config("SLURM_STEP_GPUS=1", mounts=own)
    config["linux"]["devices"] = [{"path": "/dev/nvidia4", "type": "c", "major": 195, "minor": 4},
                                  {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]
    fitted = oci_run.fitted_config(config, STEP_0, ON_NODE)
    assert bound_devices(fitted) == ["/dev/nvidia1"]
    assert fitted["linux"]["devices"] == [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]


@pytest.mark.parametrize(
    "value",
    ["1;touch /tmp/x", "0,1 ", "../../etc/passwd", "0,,1", "-1", "NoDevFiles", "MIG-4f6a", "1\n2", "0x1", "１"],
)
def test_gpu_lists_that_are_not_digits_and_commas_refuse_the_step(value):
    with pytest.raises(oci_run.StepRefused, match="not a list of GPU numbers"):
        oci_run.fitted_config(umoci_config(f"SLURM_STEP_GPUS={value}"), STEP_0, ON_NODE)


def test_a_gpu_the_node_lacks_refuses_the_step():
    with pytest.raises(oci_run.StepRefused, match="/dev/nvidia9, which this node does not have"):
        oci_run.fitted_config(umoci_config("SLURM_STEP_GPUS=9"), STEP_0, ON_NODE)


@pytest.mark.parametrize("container_id", ["h100-0.alice.17.0", "h100-0.alice.17.x.0", "17.0.0"])
def test_a_container_id_not_of_oci_conf_s_form_refuses_the_step(container_id):
    with pytest.raises(oci_run.StepRefused, match="NODE.USER.JOB.STEP.TASK"):
        oci_run.fitted_config(umoci_config(), container_id, ON_NODE)


def test_proc_is_bound_from_the_step_in_its_pid_namespace():
    config = oci_run.fitted_config(umoci_config(), STEP_0, ON_NODE)
    assert config["mounts"][0] == oci_run.PROC
    assert {"type": "pid"} not in config["linux"]["namespaces"]
    assert config["mounts"][1]["destination"] == "/dev"  # the rest untouched


def test_the_container_has_the_node_s_host_name_in_the_step_s_uts_namespace():
    config = oci_run.fitted_config(umoci_config(), STEP_0, ON_NODE)
    assert {"type": "uts"} not in config["linux"]["namespaces"] and "hostname" not in config
    assert {"type": "user"} in config["linux"]["namespaces"] and {"type": "mount"} in config["linux"]["namespaces"]


def test_the_bundle_s_own_config_is_not_changed():
    config = umoci_config("SLURM_STEP_GPUS=1")
    before = repr(config)
    oci_run.fitted_config(config, STEP_0, ON_NODE)
    assert repr(config) == before
