"""Slurm-scheduled pods, end to end (spec.bridge, docs/design/slurm-scheduled-pods.md): an
application team's Deployment, in a namespace the cluster admin mapped to a Slurm account, is
placed by Slurm as a job of that account, not by kube-scheduler.

Its own SlurmCluster (examples/demo.yaml's cpu NodeSet with one 1-CPU slurmd pod, a `serving`
account, the bridge mapping namespace e2e-bridge-apps to it) in its own namespace. The cpu
NodeSet is bridged (spec.bridged): its slurmd pod runs on the Kubernetes node the test dedicates
to the bridge as an admin would (label and taint kubeslurm.io/bridge=research), requesting only
slurmd's overhead, and the placeholder jobs ask for the nodes with feature kubeslurm_bridged. The
node is given back afterwards. The pods are busybox's httpd, which every node of the local
cluster has. What a user sees is what is checked: squeue and sacct in the login pod, `kubectl
describe pod`, the pod's node, its Service. Last, the NodeSet grows to two nodes and a Job's two
workers in one pod group start together or not at all.
"""

from __future__ import annotations

import re
import time

import pytest
import yaml

from kubeslurm.api.bridge import BRIDGED_FEATURE, scheduler_name
from kubeslurm.reconcile.bridge_pods import POD_GROUP_LABEL, POD_GROUP_SIZE_ANNOTATION
from kubeslurm.render.bridge.bridged_nodes import SLURMD_OVERHEAD_REQUESTS
from kubeslurm.render.bridge.device_plugin import device_plugin_name
from testbed import deployment
from testbed.local_cluster.system_images import BUSYBOX_IMAGE
from testbed.waiting import wait_for

from .workload_clusters import CLUSTER, LOGIN, bridged_only, demo_variant

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-bridge"
APPS = "e2e-bridge-apps"  # the bridged namespace: an application team's, not the cluster's
ACCOUNT, USER = "serving", "svc-web"
SLURMD = "cpu-0"


def _pod_spec(app: str) -> dict:
    # 100m and 32Mi fit beside the slurmd pod on its Kubernetes node (the kubelet admits by
    # requests); Slurm rounds the CPU up to 1, which is all cpu-0 has: a second such pod waits.
    return {
        "schedulerName": scheduler_name(CLUSTER),
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "web", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", f"mkdir -p /www && echo {app} on $(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"],
            "ports": [{"containerPort": 8080}],
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "32Mi"}},
        }],
    }


def _deployment(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": APPS},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": _pod_spec(name)}}}


def _service(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": APPS},
            "spec": {"selector": {"app": name}, "ports": [{"port": 8080, "targetPort": 8080}]}}


@pytest.fixture(scope="module")
def bridge_node(kube, operator):
    """A node dedicated to the cluster's bridge, the way the README tells an admin to; given back
    (label and taint removed) at the end, also when a test failed."""
    client, _local = kube
    node = deployment.bridge_test_node(client)
    deployment.dedicate_node_to_bridge(client, node, CLUSTER)
    try:
        yield node
    finally:
        deployment.release_bridged_nodes(client)


@pytest.fixture(scope="module")
def login(kube, operator, bridge_node):
    client, _local = kube
    client.run("delete", "namespace", APPS, "--ignore-not-found", "--timeout=300s")
    client.ensure_namespace(APPS, deployment.TEST_NAMESPACE_LABELS)
    try:
        with demo_variant(client, NAMESPACE, bridged_only("cpu", "cpu", APPS, ACCOUNT, USER)) as researcher:
            yield researcher
    finally:
        client.run("delete", "namespace", APPS, "--ignore-not-found", "--wait=false", check=False)


def _pods(kube, app: str) -> list[dict]:
    return kube.get("pods", "-n", APPS, "-l", f"app={app}")["items"]


def _one_pod(kube, app: str) -> dict | None:
    pods = [p for p in _pods(kube, app) if not p["metadata"].get("deletionTimestamp")]
    return pods[0] if len(pods) == 1 else None


def _running_on_a_node(kube, app: str) -> dict | None:
    pod = _one_pod(kube, app)
    ready = pod and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
    return pod if ready else None


def _as_admin(login, argv: list[str]) -> str:
    """A Slurm command as root in the login pod: an admin sees every user's jobs."""
    return login.kube.exec(NAMESPACE, LOGIN, "login", argv).stdout


def _jobs(login, pod: dict) -> list[dict]:
    """The pod's placeholder jobs as Slurm lists them (squeue): id, state, account, user, node, reason."""
    name = f"kubeslurm-pod:{APPS}/{pod['metadata']['name']}"
    out = _as_admin(login, ["squeue", "-h", "-a", "-t", "all", "-n", name, "-o", "%i|%T|%a|%u|%N|%r"])
    keys = ("id", "state", "account", "user", "nodes", "reason")
    return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]


def _sacct(login, job_id: str) -> tuple[str, str] | None:
    """(account, state) of the job in the accounting database; None until slurmdbd has it."""
    out = _as_admin(login, ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "Account,State"]).strip()
    if not out:
        return None
    account, state = out.splitlines()[0].split("|")
    return account, state.split()[0]


def _outsider(node: str) -> dict:
    """A pod of the default scheduler that wants the bridged node."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "outsider", "namespace": APPS},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "sleep", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]}}


def test_the_bridged_node_set_runs_on_the_dedicated_node_and_nothing_else_is_scheduled_there(login, bridge_node):
    kube = login.kube
    slurmd = login.pod(SLURMD)
    assert slurmd["spec"]["nodeName"] == bridge_node, (slurmd["spec"]["nodeName"], bridge_node)
    (container,) = [c for c in slurmd["spec"]["containers"] if c["name"] == "slurmd"]
    requests = container["resources"]["requests"]
    assert {k: requests[k] for k in ("cpu", "memory")} == SLURMD_OVERHEAD_REQUESTS, container["resources"]
    assert container["resources"]["limits"]["cpu"] == "1", container["resources"]
    # The in-cluster operator (helm, the chart's RBAC, image and the local cluster's device folder)
    # deployed the GPU device plugin for the bridged cluster, on the one dedicated node.
    plugin = wait_for(lambda: kube.get("daemonset", device_plugin_name(CLUSTER), "-n", NAMESPACE), 60,
                      "the device plugin DaemonSet", interval=2)
    assert [o["kind"] for o in plugin["metadata"]["ownerReferences"]] == ["SlurmCluster"]
    wait_for(lambda: (kube.get("daemonset", device_plugin_name(CLUSTER), "-n", NAMESPACE).get("status") or {})
             .get("desiredNumberScheduled") == 1, 60, "the device plugin scheduled on the dedicated node", interval=2)

    # A pod of the default scheduler that asks for that node is refused for the taint: pending.
    kube.apply(yaml.safe_dump(_outsider(bridge_node)))
    try:
        def refused():
            pod = kube.get("pod", "outsider", "-n", APPS) or {}
            condition = next((c for c in (pod.get("status") or {}).get("conditions", []) if c["type"] == "PodScheduled"), {})
            return condition if condition.get("status") == "False" and "untolerated taint" in condition.get("message", "") else None
        condition = wait_for(refused, 60, "the outsider pod refused for the bridge's taint", interval=2)
        assert "kubeslurm.io/bridge" in condition["message"], condition
        pod = kube.get("pod", "outsider", "-n", APPS)
        assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName"), pod["status"]
    finally:
        kube.run("delete", "pod", "outsider", "-n", APPS, "--ignore-not-found", "--wait=false", check=False)


def test_slurm_places_a_deployment_and_holds_the_next_pod_until_the_first_is_gone(login):
    kube = login.kube
    slurmd_node = login.pod(SLURMD)["spec"]["nodeName"]
    kube.apply("\n---\n".join(yaml.safe_dump(d) for d in (_deployment("web"), _service("web"))))

    # Slurm places it: a job of the mapped account and user runs on cpu-0, and the pod is bound
    # to the Kubernetes node of cpu-0's slurmd pod; kube-scheduler never touched it.
    web = wait_for(lambda: _running_on_a_node(kube, "web"), 240, "the web Deployment's pod Ready", interval=2)
    assert web["spec"]["nodeName"] == slurmd_node, (web["spec"]["nodeName"], slurmd_node)
    (job,) = _jobs(login, web)
    assert job["state"] == "RUNNING" and job["account"] == ACCOUNT and job["user"] == USER and job["nodes"] == SLURMD, job
    # The cluster has a bridged NodeSet: the job asked for the bridged nodes' feature.
    assert _as_admin(login, ["squeue", "-h", "-a", "-j", job["id"], "-o", "%f"]).strip() == BRIDGED_FEATURE
    wait_for(lambda: _sacct(login, job["id"]) == (ACCOUNT, "RUNNING"), 60, f"sacct: job {job['id']} running, account {ACCOUNT}",
             interval=2)
    events = kube.run("get", "events", "-n", APPS, "--field-selector", f"involvedObject.name={web['metadata']['name']}",
                      "-o", "custom-columns=R:.reason,S:.source.component", "--no-headers").stdout
    assert "SlurmJobSubmitted" in events and "BoundBySlurm" in events and "Scheduled" not in events.split(), events

    # It answers through its Service, from the login pod.
    url = f"http://web.{APPS}.svc:8080/"
    answer = wait_for(lambda: login.sh(f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}', timeout=5).read().decode())\"",
                                       check=False).strip() or None, 60, "the web Service answering", interval=2)
    assert answer == f"web on {web['metadata']['name']}", answer

    # A second pod does not fit (cpu-0 has one CPU, Slurm gives the first all of it): it waits,
    # and `kubectl describe pod` says why, in Slurm's words.
    kube.apply(yaml.safe_dump(_deployment("batch-api")))

    def waiting_with_reason():
        pod = _one_pod(kube, "batch-api")
        jobs = pod and _jobs(login, pod)
        if not jobs or jobs[0]["state"] != "PENDING":
            return None
        condition = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), {})
        said = re.fullmatch(rf"Slurm job {jobs[0]['id']} pending: (Resources|Priority)", condition.get("message", ""))
        return (pod, jobs[0], condition["message"]) if said and condition["status"] == "False" else None

    second, second_job, message = wait_for(waiting_with_reason, 120, "the second pod pending in Slurm, with the reason shown",
                                           interval=2)
    assert not second["spec"].get("nodeName")
    described = kube.run("describe", "pod", "-n", APPS, second["metadata"]["name"]).stdout
    assert re.search(r"PodScheduled\s+False", described), described
    assert re.search(rf"SlurmPending\s+.*{re.escape(message)}", described), described  # the Events of describe

    # Scaling web to zero deletes its pod: its job is cancelled, held until the pod is gone, then
    # ended; the second pod's job starts and the pod is bound and runs on cpu-0's node.
    kube.run("scale", "deployment", "web", "-n", APPS, "--replicas=0")
    started = wait_for(lambda: _running_on_a_node(kube, "batch-api"), 180, "the second pod Ready once the first is gone",
                       interval=2)
    assert started["metadata"]["uid"] == second["metadata"]["uid"]
    assert started["spec"]["nodeName"] == slurmd_node
    assert not _pods(kube, "web"), "the first pod is gone before the second was bound"
    wait_for(lambda: _sacct(login, job["id"]) == (ACCOUNT, "CANCELLED"), 60, f"sacct: job {job['id']} cancelled", interval=2)
    (running,) = _jobs(login, started)
    assert running["id"] == second_job["id"] and running["state"] == "RUNNING" and running["nodes"] == SLURMD, running


def test_a_pod_from_a_namespace_without_a_mapping_is_told_what_to_add(login):
    """A team whose namespace is not in spec.bridge.namespaces asks for the cluster's scheduler:
    nothing schedules its pod (kube-scheduler ignores it, Slurm is not asked), and
    `kubectl describe pod` says what to add, and where."""
    kube = login.kube
    stray = f"{APPS}-unmapped"
    kube.run("delete", "namespace", stray, "--ignore-not-found", "--timeout=300s")
    kube.ensure_namespace(stray, deployment.TEST_NAMESPACE_LABELS)
    try:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray-0", "namespace": stray},
               "spec": _pod_spec("stray")}
        kube.apply(yaml.safe_dump(pod))

        def told():
            live = kube.get("pod", "stray-0", "-n", stray) or {}
            condition = next((c for c in (live.get("status") or {}).get("conditions", []) if c["type"] == "PodScheduled"), {})
            return condition if condition.get("status") == "False" else None
        condition = wait_for(told, 120, "the stray pod told why it waits", interval=2)
        assert (f"namespace {stray} is not in spec.bridge.namespaces of SlurmCluster {NAMESPACE}/{CLUSTER}"
                in condition["message"]), condition
        described = kube.run("describe", "pod", "-n", stray, "stray-0").stdout
        assert "add it there with the Slurm account and user its pods run as" in described, described
        assert not (kube.get("pod", "stray-0", "-n", stray) or {}).get("spec", {}).get("nodeName")
        assert _as_admin(login, ["squeue", "-h", "-a", "-n", f"kubeslurm-pod:{stray}/stray-0"]).strip() == ""
    finally:
        kube.run("delete", "namespace", stray, "--ignore-not-found", "--wait=false", check=False)


def _gang_job(name: str, workers: int) -> dict:
    """A Kubernetes Job of `workers` pods that must start together (a distributed run's workers):
    one pod group, as a team would write it."""
    spec = _pod_spec(name)
    spec["restartPolicy"] = "Never"
    spec["containers"][0]["command"] = ["sh", "-c", "echo worker on $(hostname); sleep 20"]
    spec["containers"][0].pop("ports")
    template = {"metadata": {"labels": {"app": name, POD_GROUP_LABEL: name},
                             "annotations": {POD_GROUP_SIZE_ANNOTATION: str(workers)}},
                "spec": spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": APPS},
            "spec": {"parallelism": workers, "completions": workers, "backoffLimit": 0, "template": template}}


def test_a_pod_group_starts_whole_on_two_nodes_or_not_at_all(login):
    """Two workers of one Job in one pod group: while Slurm has one free node of the two they
    need, neither starts; once alice's job frees the other, both are placed by ONE Slurm job of
    two nodes, each on the Kubernetes node of its own slurmd pod, and when they finish the
    job ends and its nodes are free again."""
    kube = login.kube
    kube.run("delete", "deployment", "--all", "-n", APPS, "--wait=true", "--timeout=120s")
    kube.run("scale", "nodeset", "cpu", "-n", NAMESPACE, "--replicas=2")
    wait_for(lambda: sorted(_as_admin(login, ["sinfo", "-h", "-N", "-p", "cpu", "-o", "%N %t"]).split()) ==
             sorted(["cpu-0", "idle", "cpu-1", "idle"]), 240, "cpu-0 and cpu-1 idle", interval=3)

    # alice's job holds one of the two nodes: the group, which needs both, must not start in part.
    held = login.sh("sbatch --parsable -p cpu -N1 --wrap 'sleep 900'").strip().splitlines()[-1]
    wait_for(lambda: _as_admin(login, ["squeue", "-h", "-j", held, "-o", "%T"]).strip() == "RUNNING", 120,
             f"alice's job {held} running", interval=2)
    kube.apply(yaml.safe_dump(_gang_job("gang", 2)))

    def group_job(state: str | None = None) -> dict | None:
        out = _as_admin(login, ["squeue", "-h", "-a", "-n", f"kubeslurm-group:{APPS}/gang", "-o", "%i|%T|%a|%D|%N|%r"])
        jobs = [dict(zip(("id", "state", "account", "count", "nodes", "reason"), line.split("|")))
                for line in out.splitlines() if line.strip()]
        return jobs[0] if jobs and (state is None or jobs[0]["state"] == state) else None

    pending = wait_for(lambda: group_job("PENDING"), 120, "the group's one job pending in Slurm", interval=2)
    assert pending["count"] == "2" and pending["account"] == ACCOUNT, pending
    workers = wait_for(lambda: (pods := _pods(kube, "gang")) and len(pods) == 2 and all(
        "Slurm job" in next((c.get("message", "") for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), "")
        for p in pods) and pods, 60, "both workers told why they wait", interval=2)
    for _ in range(5):  # a while with one node free: neither worker is placed on it (sampled once a second)
        assert not [p["metadata"]["name"] for p in _pods(kube, "gang") if p["spec"].get("nodeName")]
        assert group_job("PENDING") is not None
        time.sleep(1)

    login.sh(f"scancel {held}")
    running = wait_for(lambda: group_job("RUNNING"), 120, "the group's job running", interval=2)
    assert running["id"] == pending["id"] and running["count"] == "2", running
    placed = wait_for(lambda: (pods := _pods(kube, "gang")) and all(p["spec"].get("nodeName") for p in pods) and pods, 120,
                      "both workers bound", interval=2)
    # Members by name onto the job's nodes by name: each on the Kubernetes node of its slurmd pod.
    slurmd_nodes = {name: login.pod(name)["spec"]["nodeName"] for name in ("cpu-0", "cpu-1")}
    assert [p["spec"]["nodeName"] for p in sorted(placed, key=lambda p: p["metadata"]["name"])] == \
        [slurmd_nodes["cpu-0"], slurmd_nodes["cpu-1"]], (placed, slurmd_nodes)
    assert {p["metadata"]["uid"] for p in placed} == {p["metadata"]["uid"] for p in workers}
    # Both finish; the group's job ends with them and Slurm has both nodes free again.
    wait_for(lambda: (kube.get("job", "gang", "-n", APPS).get("status") or {}).get("succeeded") == 2, 180,
             "the Job's two workers succeeded", interval=3)
    wait_for(lambda: group_job() is None or group_job()["state"] not in ("RUNNING", "PENDING", "COMPLETING"), 120,
             "the group's job ended", interval=3)
    wait_for(lambda: _sacct(login, running["id"]) is not None and _sacct(login, running["id"])[1] != "RUNNING", 60,
             "sacct: the group's job ended", interval=2)
