"""spec.nodeHealth.check run by real Slurm 24.11: the image's kubeslurm-health-check as
HealthCheckProgram, scheduled by slurmctld, drains its own node with its message and
resumes it once it passes again; a passing check keeps the node idle; a human's drain
is never touched.

One cluster for the module, rendered from a SlurmCluster that asks for the check every
10 s (the shortest interval the model allows): two `gpu` nodes with two fake GPUs each
(/dev/nvidia0 and 1, character devices 195:N as the device plugin gives a pod). The
testbed installs the script where images/slurm/setup.sh does. The tests run in file
order and each leaves both nodes idle.
"""

from __future__ import annotations

import pytest

from kubeslurm.api.node_health import SITE_CHECK_DIR, SITE_CHECK_FILE, NodeCondition
from kubeslurm.reconcile.node_health import HealthActions, health_actions
from kubeslurm.reconcile.replacement import replacements
from kubeslurm.render.slurmd.statefulset import PRE_STOP
from testbed.native_slurm.rendered import load, native_cluster, slurm_control
from testbed.waiting import wait_for
from tests.slurm.conftest import stopped_after

pytestmark = pytest.mark.slurm

INTERVAL = 10
CLUSTER = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
    "metadata": {"name": "healthy", "namespace": "hpc"},
    "spec": {
        "accounting": {"enabled": False},
        "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
        "nodeHealth": {"check": {"intervalSeconds": INTERVAL}},
    },
}
GPU_NODE_SET = {
    "apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": "gpu", "namespace": "hpc"},
    "spec": {"clusterName": "healthy", "replicas": 2, "resources": {"cpu": "1", "memory": "1Gi"},
             "gpus": {"count": 2, "type": "a100"}},
}
SITE_CHECK = f"{SITE_CHECK_DIR}/{SITE_CHECK_FILE}"
# Enough for slurmctld to start a check run on every node and the check to act on it.
CHECK_TIMEOUT = 6 * INTERVAL


class Nodes:
    """The running cluster seen the way the operator sees it (its SlurmControl)."""

    def __init__(self, cluster):
        self.c = cluster
        self.ctl = slurm_control(cluster)

    def node(self, name: str):
        return next(n for n in self.ctl.nodes() if n.name == name)

    def on(self, host: str, cmd: str, input: str | None = None):
        return self.c.run(host, cmd, input=input)

    def site_check(self, host: str, body: str | None) -> None:
        """Install (or with None remove) the site's script where the slurmd pod mounts it."""
        if body is None:
            self.on(host, f"rm -f {SITE_CHECK}")
        else:
            self.on(host, f"mkdir -p {SITE_CHECK_DIR} && cat > {SITE_CHECK} && chmod 755 {SITE_CHECK}",
                    input="#!/bin/sh\n" + body)

    def wait_drained(self, name: str, reason: str) -> None:
        wait_for(lambda: self.node(name).drained and self.node(name).reason == reason, CHECK_TIMEOUT,
                 f"{name} drained with {reason!r} (is {self.node(name).states} {self.node(name).reason!r})")

    def idle(self, name: str) -> bool:
        node = self.node(name)
        return node.base_state == "IDLE" and not node.drained and not node.down

    def wait_idle(self, name: str) -> None:
        wait_for(lambda: self.idle(name), CHECK_TIMEOUT,
                 f"{name} idle (is {self.node(name).states} {self.node(name).reason!r})")

    def wait_site_check_ran(self, host: str, status: int = 0) -> None:
        """Waits for a run of a site script that records itself and exits STATUS (then removes it)."""
        self.on(host, "rm -f /tmp/ran")
        self.site_check(host, f"date +%s >> /tmp/ran\necho site check says {status}\nexit {status}\n")
        wait_for(lambda: self.c.run(host, "test -s /tmp/ran", check=False).returncode == 0, CHECK_TIMEOUT,
                 f"the health check to run on {host}")
        self.site_check(host, None)


@pytest.fixture(scope="module")
def nodes(slurm_rootfs, request):
    model, node_sets = load([CLUSTER, GPU_NODE_SET])
    cluster = native_cluster(slurm_rootfs, model, node_sets, name="health", login=False)
    with stopped_after(cluster, request):
        cluster.start()
        yield Nodes(cluster)


def test_the_rendered_config_runs_the_image_check_on_every_node(nodes):
    config = nodes.c.run(nodes.c.controller, "scontrol show config").stdout
    assert "/usr/local/sbin/kubeslurm-health-check" in config
    assert f"HealthCheckInterval     = {INTERVAL} sec" in config


def test_a_passing_check_keeps_the_node_idle(nodes):
    nodes.wait_site_check_ran("gpu-0")
    nodes.wait_site_check_ran("gpu-0")  # and a later run
    assert nodes.idle("gpu-0") and nodes.node("gpu-0").reason == ""


def test_a_missing_gpu_drains_the_node_with_the_check_message_and_it_resumes_when_back(nodes):
    nodes.on("gpu-1", "rm /dev/nvidia1")
    nodes.wait_drained(
        "gpu-1", "kubeslurm: health check: 1 GPU device files (/dev/nvidia0) but the node registered 2 GPUs (Gres=gpu:a100:2)")
    assert nodes.idle("gpu-0")
    nodes.on("gpu-1", "mknod -m 666 /dev/nvidia1 c 195 1")
    nodes.wait_idle("gpu-1")


def test_a_failing_site_script_drains_with_its_first_line(nodes):
    nodes.site_check("gpu-0", 'echo "ECC errors: 12 on GPU 1"\necho more\nexit 3\n')
    nodes.wait_drained("gpu-0", "kubeslurm: health check: site check failed (exit 3): ECC errors: 12 on GPU 1")
    nodes.site_check("gpu-0", None)
    nodes.wait_idle("gpu-0")


def test_a_human_drain_keeps_its_reason_whatever_the_check_finds(nodes):
    nodes.ctl.run(["scontrol", "update", "NodeName=gpu-1", "State=DRAIN", "Reason=replacing a fan"])
    nodes.wait_site_check_ran("gpu-1", status=0)
    assert nodes.node("gpu-1").drained and nodes.node("gpu-1").reason == "replacing a fan"
    nodes.wait_site_check_ran("gpu-1", status=1)
    assert nodes.node("gpu-1").drained and nodes.node("gpu-1").reason == "replacing a fan"
    nodes.ctl.resume(["gpu-1"])
    nodes.wait_idle("gpu-1")


def test_kubernetes_trouble_drains_through_real_slurm_and_a_second_look_changes_nothing(nodes):
    """The operator's decision (reconcile/node_health.py) on what real Slurm reports back:
    the reason it wrote reads back as its own, so the next reconcile writes nothing, the
    image's check leaves that drain alone, and clearing the condition resumes the node."""
    gpu_problem = {"type": "GPUProblem", "status": "True", "reason": "XidError", "message": "Xid 79 on GPU 1: fell off the bus"}
    k8s = {"metadata": {"name": "k1"}, "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}, gpu_problem]}}
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    pods = [{"metadata": {"name": "gpu-0"}, "spec": {"nodeName": "k1"}, "status": ready},
            {"metadata": {"name": "gpu-1"}, "spec": {"nodeName": "k2"}, "status": ready}]
    k8s_nodes = {"k1": k8s, "k2": {"metadata": {"name": "k2"}, "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}}
    conditions = [NodeCondition(type="GPUProblem")]

    def actions():
        return health_actions(pods, k8s_nodes, {n.name: n for n in nodes.ctl.nodes()}, conditions)

    first = actions()
    assert first == HealthActions({"gpu-0": "kubernetes node k1 has GPUProblem=True: Xid 79 on GPU 1: fell off the bus"}, [])
    for node, why in first.drain.items():
        nodes.ctl.drain([node], why)
    assert actions() == HealthActions({}, [])
    nodes.wait_site_check_ran("gpu-0")
    assert nodes.node("gpu-0").reason == "kubeslurm: kubernetes node k1 has GPUProblem=True: Xid 79 on GPU 1: fell off the bus"
    gpu_problem["status"] = "False"
    assert actions() == HealthActions({}, ["gpu-0"])
    nodes.ctl.resume(["gpu-0"])
    nodes.wait_idle("gpu-0")
    assert actions() == HealthActions({}, [])


def pre_stop_downs(nodes, name: str, reason: str) -> None:
    """The preStop hook run as the kubelet runs it, then the pod's end (its host stopped): slurmctld
    set the node DOWN with `reason`. Read from slurmctld's log, not the node's state: until the
    host stops, the live slurmd may answer a ping, and ReturnToService=2 then lifts the DOWN (in
    a pod, too, for the instant between the hook and the container's end)."""
    said = f"update_node: node {name} reason set to: {reason}\nslurmctld: update_node: node {name} state set to DOWN"
    before = nodes.c.logs("slurmctld").count(said)
    nodes.c.run(name, ["/usr/bin/env", f"POD_NAME={name}", "/bin/sh", "-c", PRE_STOP])
    nodes.c.stop_host(name)
    log = nodes.c.logs("slurmctld")
    assert log.count(said) == before + 1, log[-3000:]


def test_a_replaced_pod_keeps_its_health_drain_through_pre_stop_and_comes_back_healthy(nodes):
    """replaceUnhealthy on real Slurm: the operator's choice of pod to replace, the slurmd pod's
    preStop hook (as the kubelet runs it) keeping the drain's reason through its DOWN, and the
    new pod (a fresh host: its GPUs back) registering and resumed by its own check."""
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    pods = [{"metadata": {"name": n, "labels": {"kubeslurm.io/nodeset": "gpu"}}, "spec": {"nodeName": "k1"}, "status": ready}
            for n in ("gpu-0", "gpu-1")]

    def chosen():
        return replacements(pods, {n.name: n for n in nodes.ctl.nodes()}, nodes.ctl.jobs(), {"gpu"})

    nodes.on("gpu-1", "mv /dev/nvidia1 /dev/.nvidia1-gone")
    reason = "kubeslurm: health check: 1 GPU device files (/dev/nvidia0) but the node registered 2 GPUs (Gres=gpu:a100:2)"
    nodes.wait_drained("gpu-1", reason)
    assert chosen() == {"gpu-1": reason.removeprefix("kubeslurm: ")}
    # The operator deleted the pod: the kubelet runs its preStop hook on a terminating pod.
    pods[1]["metadata"]["deletionTimestamp"] = "2026-12-04T17:00:00Z"
    pre_stop_downs(nodes, "gpu-1", reason)
    node = nodes.node("gpu-1")
    assert node.drained and node.reason == reason, (node.states, node.reason)
    assert chosen() == {}  # being replaced (terminating, then DOWN until its new pod registers): not again
    del pods[1]["metadata"]["deletionTimestamp"]  # the new pod under the name
    nodes.c.start_node("gpu-1")
    nodes.wait_idle("gpu-1")
    assert chosen() == {}


def test_pre_stop_marks_a_node_that_is_not_drained_down_as_before(nodes):
    pre_stop_downs(nodes, "gpu-0", "kubeslurm: pod terminating")
    node = nodes.node("gpu-0")
    assert not node.drained, (node.states, node.reason)
    nodes.c.start_node("gpu-0")
    nodes.wait_idle("gpu-0")  # ReturnToService=2 lifts the DOWN once slurmd registers
