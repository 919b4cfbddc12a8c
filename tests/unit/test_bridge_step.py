"""The SyncBridge step's own decisions: nothing at all while spec.bridge is off or slurmctld is
away, and a named Degraded reason when the Slurm image lacks the bridge's Epilog. The command
is `test -x` run for real on this machine, which has no kubeslurm Epilog installed."""

import os
import subprocess

import pytest

from kubeslurm.api import parse_object
from kubeslurm.api.bridge import BRIDGE_EPILOG
from kubeslurm.reconcile.bridge_step import BridgeStep
from kubeslurm.reconcile.run_state import Run, StepFailed
from kubeslurm.reconcile.slurm_control import SlurmControl

from .test_bridge import CLUSTER, bridged

IMAGE = "site/slurm:24.11"


def slurmd_pod(name, image=IMAGE, phase="Running"):
    return {"metadata": {"name": name}, "spec": {"nodeName": "node-a", "containers": [{"name": "slurmd", "image": image}]},
            "status": {"phase": phase}}


class Commands:
    """Runs each command here, for real, and remembers where it was meant to run."""

    def __init__(self):
        self.ran: list[tuple[str, list[str]]] = []

    def __call__(self, namespace):
        def run(node, argv):
            self.ran.append((node, argv))
            return subprocess.run(argv, capture_output=True, text=True)
        return run


def run_of(document, pods, slurm=True):
    run = Run(raw=document, cluster=parse_object(document))
    run.slurmd_pods = pods
    run.slurm = SlurmControl(lambda argv, timeout=60: subprocess.CompletedProcess(argv, 1, "", "not reached")) if slurm else None
    return run


@pytest.mark.parametrize("document, slurm", [(CLUSTER, True), (bridged(), False)])
def test_the_step_runs_nothing_while_the_bridge_is_off_or_slurmctld_is_away(document, slurm):
    commands = Commands()
    BridgeStep(api=None, events=None, slurmd_access=commands)(run_of(document, [slurmd_pod("cpu-0")], slurm=slurm))
    assert commands.ran == []


def test_an_image_without_the_epilog_fails_the_step_with_a_reason_that_says_what_to_do():
    assert not os.path.exists(BRIDGE_EPILOG)  # this machine is the image without it
    commands = Commands()
    step = BridgeStep(api=None, events=None, slurmd_access=commands)
    run = run_of(bridged(), [slurmd_pod("cpu-0", phase="Pending"), slurmd_pod("cpu-1")])
    with pytest.raises(StepFailed) as failure:
        step.check_epilog(run, commands("hpc"))
    assert failure.value.step == "SyncBridge" and failure.value.reason == "BridgeEpilogMissing"
    assert IMAGE in failure.value.message and "bridge-epilog.sh" in failure.value.message
    assert commands.ran == [("cpu-1", ["test", "-x", BRIDGE_EPILOG])]  # only a running pod is asked
    with pytest.raises(StepFailed):  # not remembered as good: asked again, still refused
        step.check_epilog(run, commands("hpc"))


def test_an_image_with_the_epilog_is_checked_once():
    commands = Commands()
    step = BridgeStep(api=None, events=None, slurmd_access=commands)
    step.images_with_epilog.add(IMAGE)
    step.check_epilog(run_of(bridged(), [slurmd_pod("cpu-0"), slurmd_pod("cpu-1")]), commands("hpc"))
    assert commands.ran == []
