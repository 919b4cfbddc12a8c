"""The SyncBridge step's own decisions: nothing at all while spec.bridge is off or slurmctld is
away, and a named Degraded reason when the Slurm image lacks the bridge's Epilog. The command
is `test -x` run for real on this machine, which has no kubeslurm Epilog installed."""

import os
import subprocess
import uuid

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


class PodsOnly:
    """The API as the bridge's pass reads and writes it: listed pods by namespace, the status
    patches it makes (and nothing else to write: a test without jobs binds nothing)."""

    def __init__(self, pods):
        self.pods, self.listed, self.patched = pods, [], []

    def list(self, kind, namespace, label_selector=None, field_selector=None):
        self.listed.append((namespace, field_selector))
        return [p for p in self.pods if p["metadata"]["namespace"] == namespace]

    def get(self, kind, namespace, name):
        return None  # no placement record yet

    def patch_pod_status(self, namespace, name, patch):
        self.patched.append((namespace, name, patch["status"]["conditions"][0]["message"]))


def asking_pod(namespace, name, node=None, message=None):
    pod = {"metadata": {"namespace": namespace, "name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"))},
           "spec": {"schedulerName": "kubeslurm-research", "nodeName": node,
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
           "status": {"phase": "Pending"}}
    if message:
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "message": message}]
    return pod


def test_a_pod_asking_for_the_cluster_from_a_namespace_without_a_mapping_is_told_why_it_waits_once():
    """Namespaces where pods asked for the cluster's scheduler (the operator's watch saw them) are
    listed too: an unbound pod there shows what to add to spec.bridge.namespaces, and nothing is
    asked of Slurm for it; a pod there that is bound already (its mapping removed while it ran)
    is left alone; once shown, the message is not written again."""
    from kubeslurm.reconcile.bridge_pods import unmapped_problem
    from kubeslurm.reconcile.bridge_sync import BridgeAccess, sync_bridge

    submitted = []

    def slurm_runner(argv, timeout=60):
        if "sbatch" in argv:
            submitted.append(argv)
            return subprocess.CompletedProcess(argv, 0, "4242\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")  # squeue: no placeholder job yet

    kube = PodsOnly([asking_pod("team-x", "web-0"), asking_pod("team-x", "old-0", node="node-a"),
                     asking_pod("inference", "server-0")])
    access = BridgeAccess(kube, SlurmControl(slurm_runner), on_slurmd=None)
    cluster = parse_object(bridged())
    plan = sync_bridge(cluster, [], access, asking={"team-x", "inference"})
    assert sorted(kube.listed) == [("inference", "spec.schedulerName=kubeslurm-research"),
                                   ("team-x", "spec.schedulerName=kubeslurm-research")]
    message = unmapped_problem("team-x", "hpc", "research")
    assert "spec.bridge.namespaces of SlurmCluster hpc/research" in message
    assert kube.patched == [("team-x", "web-0", message)]
    assert plan.delete_pods == []
    # the mapped namespace's pod is asked for as ever; nothing for team-x's
    assert [pod.name for pod in plan.submit] == ["server-0"] and len(submitted) == 1, submitted
    assert plan.submitted == 1  # sbatch took it: the next run comes within a second
    assert "--job-name=kubeslurm-pod:inference/server-0" in " ".join(submitted[0])

    kube = PodsOnly([asking_pod("team-x", "web-0", message=message)])
    access = BridgeAccess(kube, SlurmControl(slurm_runner), on_slurmd=None)
    assert sync_bridge(cluster, [], access, asking={"team-x"}).empty and kube.patched == [] and len(submitted) == 1


def test_the_operator_remembers_where_pods_asked_for_a_cluster():
    from kubeslurm.reconcile.handlers import Runtime

    runtime = Runtime()
    assert runtime.namespaces_asking("research") == frozenset()
    runtime.saw_bridged_pod("research", "team-x")
    runtime.saw_bridged_pod("research", "team-x")
    runtime.saw_bridged_pod("other", "team-y")
    assert runtime.namespaces_asking("research") == {"team-x"}


def test_a_pod_sbatch_refuses_is_asked_again_at_the_next_resync_not_within_a_second():
    from kubeslurm.reconcile.bridge_sync import BridgeAccess, sync_bridge

    def refusing(argv, timeout=60):
        if "sbatch" in argv:
            return subprocess.CompletedProcess(argv, 1, "", "sbatch: error: Requested node configuration is not available")
        return subprocess.CompletedProcess(argv, 0, "", "")

    kube = PodsOnly([asking_pod("inference", "server-0")])
    plan = sync_bridge(parse_object(bridged()), [], BridgeAccess(kube, SlurmControl(refusing), on_slurmd=None),
                       asking={"inference"})
    assert [pod.name for pod in plan.submit] == ["server-0"] and plan.submitted == 0
    assert kube.patched and "Requested node configuration is not available" in kube.patched[0][2]
