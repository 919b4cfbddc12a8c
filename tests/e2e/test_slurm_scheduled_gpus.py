"""One GPU pool for a training job and an inference Deployment, never double-booked (issue 18).

Its own SlurmCluster: examples/demo.yaml's h100 NodeSet bridged (spec.bridged) with all eight
fake GPUs and two CPUs of the Kubernetes node the test dedicates to the bridge, as an admin
would (label and taint kubeslurm.io/bridge=research); the bridge maps namespace
e2e-bridge-gpu-apps to account `serving`. alice's batch job holds six of the eight GPUs. An
inference Deployment of two replicas asks for `kubeslurm.io/gpu: 2` each: Slurm places the
first on the two GPUs it has left, and the kubelet gives that pod exactly those device files
(the kubeslurm device plugin answers from Slurm's allocation); the second waits in Slurm, not in
the kubelet, until alice's job ends, and then gets two of hers. What is checked is what a user
sees: scontrol show job -d in the login pod, the pods' own /dev and environment, the Service.

QOS preemption both ways (`scheduling.preemption: qos`, PreemptMode=REQUEUE): `scavenger` (low),
`serving` (the bridged namespace's mapping; preempts scavenger), `urgent` (preempts both);
alice's account may use normal, urgent and scavenger. An urgent training job preempts the
inference placeholders: their pods are deleted, the training job starts only once they are
gone, and the Deployment's new pods wait in Slurm; the operator is killed in the middle of it.
The other way, an inference pod preempts alice's scavenger job, which is requeued and later
completes. Throughout every test a sampler (testbed/double_booking.py) checks once a second
that no GPU of the bridged node has two holders and no bridged pod runs without its job.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from kubeslurm.api.bridge import scheduler_name
from kubeslurm.device_plugin.server import RESOURCE as BRIDGE_GPU
from kubeslurm.render.bridge.bridged_nodes import BRIDGE_NODE_KEY
from testbed import deployment
from testbed.double_booking import DoubleBookingSampler
from testbed.local_cluster.system_images import BUSYBOX_IMAGE
from testbed.waiting import wait_for

from .workload_clusters import CLUSTER, LOGIN, bridged_only, demo_variant, slurm_index_list

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-bridge-gpu"
APPS = "e2e-bridge-gpu-apps"
ACCOUNT, USER = "serving", "svc-infer"
SLURMD = "h100-0"
GPUS = 8  # every fake GPU of a local cluster node (testbed/local_cluster/layout.py DEFAULT_GPUS)
APP = "infer"
# Priorities: urgent > serving > normal, scavenger. Each preempts the ones it names (requeued;
# a placeholder, submitted --no-requeue, is ended instead and its pod deleted).
QOS = [
    {"name": "scavenger", "priority": 0},
    {"name": "serving", "priority": 100, "preempt": ["scavenger"]},
    {"name": "urgent", "priority": 1000, "preempt": ["serving", "scavenger"]},
]


def _with_preemption(change):
    """The demo_variant change, plus QOS preemption: the bridged namespace's placeholders in QOS
    serving, alice's account (vision) allowed urgent and scavenger beside normal."""
    def changed(documents: list[dict]) -> list[dict]:
        documents = change(documents)
        for document in documents:
            if document["kind"] != "SlurmCluster":
                continue
            spec = document["spec"]
            spec["scheduling"]["preemption"] = "qos"
            spec["qos"] = QOS
            for account in spec["accounts"]:
                if account["name"] == "vision":
                    account.update({"qos": ["normal", "urgent", "scavenger"], "defaultQOS": "normal"})
                elif account["name"] == ACCOUNT:
                    account.update({"qos": ["serving"], "defaultQOS": "serving"})
            for mapping in spec["bridge"]["namespaces"]:
                mapping["qos"] = "serving"
        return documents
    return changed


def _inference(replicas: int = 2) -> list[dict]:
    """Two replicas of two GPUs each: each serves the GPUs it was given (its /dev and environment)."""
    labels = {"app": APP}
    serve = ("mkdir -p /www && { echo devices $(ls /dev | grep -E '^nvidia[0-9]+$' | tr '\\n' ' '); "
             "echo visible $NVIDIA_VISIBLE_DEVICES; echo job $KUBESLURM_SLURM_JOB_ID; } > /www/index.html "
             "&& exec httpd -f -p 8080 -h /www")
    pod = {
        "schedulerName": scheduler_name(CLUSTER),
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "serve", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", serve],
            "ports": [{"containerPort": 8080}],
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                          "limits": {"memory": "32Mi", BRIDGE_GPU: "2"}},
        }],
    }
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP, "namespace": APPS},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": APP, "namespace": APPS},
         "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]}},
    ]


@pytest.fixture(scope="module")
def login(kube, operator):
    client, _local = kube
    node = deployment.bridge_test_node(client)
    deployment.dedicate_node_to_bridge(client, node, CLUSTER)
    client.run("delete", "namespace", APPS, "--ignore-not-found", "--timeout=300s")
    client.ensure_namespace(APPS, deployment.TEST_NAMESPACE_LABELS)
    try:
        with demo_variant(client, NAMESPACE, _with_preemption(bridged_only(
                "h100", "gpu", APPS, ACCOUNT, USER,
                {"resources": {"cpu": "2", "memory": "2Gi"}, "gpus": {"count": GPUS, "type": "h100"}}))) as researcher:
            yield researcher
    finally:
        client.run("delete", "namespace", APPS, "--ignore-not-found", "--wait=false", check=False)
        deployment.release_bridged_nodes(client)


def _as_admin(login, argv: list[str]) -> str:
    return login.kube.exec(NAMESPACE, LOGIN, "login", argv, timeout=60).stdout


def _pool_empty(login) -> bool:
    """No pod in the application namespace, and no job at all in Slurm (none COMPLETING either)."""
    return not login.kube.get("pods", "-n", APPS)["items"] and not _as_admin(login, ["squeue", "-h", "-a", "-o", "%i %T"]).strip()


def _empty_the_pool(login) -> None:
    """The Deployment and Service gone, alice's jobs cancelled; the placeholders are the
    operator's to cancel and release once their pods are gone."""
    login.kube.run("delete", "deployment,service", "--all", "-n", APPS, "--ignore-not-found", "--wait=false")
    _as_admin(login, ["scancel", "--user=alice"])
    wait_for(lambda: _pool_empty(login), 240, f"no pod in {APPS} and no job in Slurm", interval=3)


@pytest.fixture
def double_booking(login):
    """The sampler, once a second from before the test's set-up until after its clean-up; no
    violation may be found. Reads as an admin does: scontrol in the login pod, the pods'
    listing, each running pod's own /dev (once)."""
    kube = login.kube

    def pod_gpus(pod: dict) -> set[int] | None:
        result = kube.exec(APPS, pod["metadata"]["name"], "serve", ["ls", "/dev"], check=False, timeout=30)
        if result.returncode != 0:
            return None
        return {int(name.removeprefix("nvidia")) for name in result.stdout.split() if re.fullmatch(r"nvidia[0-9]+", name)}

    sampler = DoubleBookingSampler(
        read_jobs=lambda: _as_admin(login, ["scontrol", "--details", "show", "job"]),
        read_pods=lambda: kube.get("pods", "-n", APPS)["items"],
        read_pod_gpus=pod_gpus, slurm_node=SLURMD, kubernetes_node=login.pod(SLURMD)["spec"]["nodeName"]).start()
    try:
        yield sampler
    finally:
        sampler.stop()
        print(f"double-booking sampler: {sampler.report()}", flush=True)
    assert sampler.violation_count == 0, sampler.report()


@pytest.fixture
def idle_pool(login, double_booking):
    """Each test starts and ends with no pod in the application namespace and no Slurm job
    (the first test leaves its Deployment running; a failed test may leave anything)."""
    _empty_the_pool(login)
    yield
    _empty_the_pool(login)


def _never_double_booked(sampler: DoubleBookingSampler, pods: int) -> None:
    """The sampler saw no violation, and it did look: samples all along (one every 3 s at least), `pods` bridged pods
    seen running (a pod counts from its second listing: the last one may need a sample more),
    most reads answered."""
    wait_for(lambda: len(sampler.pods_seen_running) >= pods, 30, f"the sampler seeing {pods} bridged pods running",
             interval=1, details=sampler.report)
    assert sampler.violation_count == 0, sampler.report()
    # Once a second, each sample a few reads through the API server: on this 2-core machine a
    # sample may take a couple of seconds, never three on average.
    assert sampler.samples >= max(10, sampler.seconds_running() / 3), (sampler.seconds_running(), sampler.report())
    assert len(sampler.failed_reads) <= sampler.samples // 10, sampler.report()


def _gpus_of_job(login, job_id: str) -> set[int]:
    """The GPU indices Slurm allocated to the job on its node (scontrol show job -d: GRES=...(IDX:...))."""
    out = _as_admin(login, ["scontrol", "show", "job", "-d", job_id])
    found = re.search(r"GRES=\S*\(IDX:([0-9,-]+)\)", out)
    assert found, out
    return slurm_index_list(found.group(1))


def _placeholder(login, pod: dict) -> tuple[str, str, str] | None:
    """(job id, state, reason) of the pod's placeholder job, as squeue lists it."""
    out = _as_admin(login, ["squeue", "-h", "-a", "-n", f"kubeslurm-pod:{APPS}/{pod['metadata']['name']}", "-o", "%i|%T|%r"])
    lines = [line for line in out.splitlines() if line.strip()]
    return tuple(lines[0].split("|")) if lines else None


def _replicas(kube) -> list[dict]:
    return [p for p in kube.get("pods", "-n", APPS, "-l", f"app={APP}")["items"] if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _served(login, pod: dict) -> dict[str, str]:
    """What the replica says it was given, read from inside it: devices, visible, job."""
    page = login.kube.exec(APPS, pod["metadata"]["name"], "serve", ["cat", "/www/index.html"]).stdout
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() if " " in line else "" for line in page.splitlines()}


def _devices(served: dict[str, str]) -> set[int]:
    return {int(name.removeprefix("nvidia")) for name in served["devices"].split()}


def test_slurm_gives_training_and_inference_disjoint_gpus_and_the_next_replica_waits_in_slurm(login, double_booking, idle_pool):
    kube = login.kube
    slurmd_node = login.pod(SLURMD)["spec"]["nodeName"]

    # alice's training job takes six of the eight GPUs (and one of the two CPUs).
    training = login.sh("sbatch --parsable -p gpu --gres=gpu:6 --mem=256M --wrap 'sleep 900'").strip().splitlines()[-1]
    wait_for(lambda: _as_admin(login, ["squeue", "-h", "-j", training, "-o", "%T"]).strip() == "RUNNING", 120,
             f"alice's job {training} running", interval=2)
    alice_gpus = _gpus_of_job(login, training)
    assert len(alice_gpus) == 6, alice_gpus

    kube.apply("\n---\n".join(yaml.safe_dump(d) for d in _inference()))

    def one_serving_one_waiting():
        pods = _replicas(kube)
        serving = [p for p in pods if _ready(p)]
        waiting = [p for p in pods if not p["spec"].get("nodeName")]
        if len(pods) != 2 or len(serving) != 1 or len(waiting) != 1:
            return None
        job = _placeholder(login, waiting[0])
        return (serving[0], waiting[0], job) if job and job[1] == "PENDING" else None
    first, second, second_job = wait_for(one_serving_one_waiting, 300,
                                         "one replica serving, the other pending in Slurm", interval=3)

    # The first replica runs on the bridged node with exactly the two GPUs Slurm gave its job,
    # none of alice's: inside the pod only those device files exist, and the environment names them.
    assert first["spec"]["nodeName"] == slurmd_node, (first["spec"]["nodeName"], slurmd_node)
    first_job = _placeholder(login, first)
    assert first_job and first_job[1] == "RUNNING", first_job
    first_gpus = _gpus_of_job(login, first_job[0])
    assert len(first_gpus) == 2 and not first_gpus & alice_gpus, (first_gpus, alice_gpus)
    served = _served(login, first)
    assert _devices(served) == first_gpus, served
    assert slurm_index_list(served["visible"]) == first_gpus and served["job"] == first_job[0], served

    # It answers through its Service, from the login pod.
    url = f"http://{APP}.{APPS}.svc:8080/"
    answer = wait_for(lambda: login.sh(f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}', timeout=5).read().decode())\"",
                                       check=False).strip() or None, 60, "the inference Service answering", interval=2)
    assert f"job {first_job[0]}" in answer, answer

    # The second waits in Slurm (no GPUs left), and says so on the pod.
    condition = next(c for c in second["status"].get("conditions", []) if c["type"] == "PodScheduled")
    assert condition["status"] == "False" and f"Slurm job {second_job[0]} pending" in condition["message"], condition

    # alice's job ends: the second replica gets two of the GPUs she held, distinct from the first's.
    login.sh(f"scancel {training}")
    started = wait_for(lambda: next((p for p in _replicas(kube) if p["metadata"]["uid"] == second["metadata"]["uid"] and _ready(p)),
                                    None), 240, "the second replica Ready once alice's job ended", interval=3)
    assert started["spec"]["nodeName"] == slurmd_node
    (job_id, state, _reason) = _placeholder(login, started)
    assert job_id == second_job[0] and state == "RUNNING", (job_id, state)
    second_gpus = _gpus_of_job(login, job_id)
    assert len(second_gpus) == 2 and not second_gpus & first_gpus, (second_gpus, first_gpus)
    assert second_gpus <= alice_gpus, (second_gpus, alice_gpus)
    served = _served(login, started)
    assert _devices(served) == second_gpus and slurm_index_list(served["visible"]) == second_gpus, served
    _never_double_booked(double_booking, pods=2)


def _squeue(login, job_id: str, columns: str = "%T") -> str:
    """squeue's columns of one job ('' once it left the queue)."""
    return _as_admin(login, ["squeue", "-h", "-j", job_id, "-o", columns]).strip()


def _runs(login, job_id: str) -> list[str]:
    """Every run of the job in accounting (sacct -D), oldest first: its state's first word."""
    out = _as_admin(login, ["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _placeholders_running(login, replicas: int):
    """The replicas, all Ready, each with its placeholder RUNNING in QOS serving: {uid: (pod, job id)}."""
    pods = _replicas(login.kube)
    if len(pods) != replicas or not all(_ready(p) for p in pods):
        return None
    found = {}
    for pod in pods:
        job = _placeholder(login, pod)
        if not job or job[1] != "RUNNING" or _squeue(login, job[0], "%q") != "serving":
            return None
        found[pod["metadata"]["uid"]] = (pod, job[0])
    return found


def test_urgent_training_preempts_the_inference_whose_pods_go_first_and_come_back_to_the_queue(login, double_booking, idle_pool):
    kube = login.kube
    kube.apply("\n---\n".join(yaml.safe_dump(d) for d in _inference(replicas=2)))
    serving = wait_for(lambda: _placeholders_running(login, 2), 300, "both replicas Ready on RUNNING placeholders", interval=3)
    old_jobs = {uid: job for uid, (_pod, job) in serving.items()}
    held = {uid: _gpus_of_job(login, job) for uid, job in old_jobs.items()}
    assert all(len(g) == 2 for g in held.values()) and not set.intersection(*held.values()), held

    # The operator dies; alice's urgent job, which needs all eight GPUs, preempts both
    # placeholders at once. They end (--no-requeue) but stay COMPLETING: the Epilog holds their
    # GPUs while the pods still run, and nobody is there to delete the pods yet.
    killed = deployment.kill_operator(kube)
    training = login.sh(f"sbatch --parsable -p gpu --qos=urgent --gres=gpu:{GPUS} --mem=256M --wrap 'sleep 900'").strip().splitlines()[-1]
    assert _squeue(login, training, "%q") == "urgent"

    # The training job starts only once both old pods are gone from the API. The job's state is
    # read before the pods: a pod listed after the job was seen running existed while it ran.
    seen = {"waited_beside_a_pod": False, "ran_beside": []}

    def training_state_and_old_pods() -> tuple[str, set[str]]:
        state = _squeue(login, training)
        present = {p["metadata"]["name"] for p in kube.get("pods", "-n", APPS)["items"] if p["metadata"]["uid"] in old_jobs}
        if state == "RUNNING" and present:
            seen["ran_beside"].append(sorted(present))
        if state == "PENDING" and present:
            seen["waited_beside_a_pod"] = True
        return state, present

    def preempted():
        training_state_and_old_pods()
        return all(_squeue(login, job) in ("COMPLETING", "PREEMPTED", "") for job in old_jobs.values())
    wait_for(preempted, 120, f"placeholders {sorted(old_jobs.values())} preempted", interval=1)

    def operator_back():
        training_state_and_old_pods()
        pod = deployment.operator_pod(kube)
        return pod if pod["metadata"]["uid"] != killed and _ready(pod) else None
    wait_for(operator_back, 180, "a new operator pod Ready", interval=1, ignore=(AssertionError,))

    def training_runs_and_old_pods_gone():
        state, present = training_state_and_old_pods()
        return state == "RUNNING" and not present
    wait_for(training_runs_and_old_pods_gone, 240, f"training job {training} running, the preempted pods gone", interval=1)
    assert seen["waited_beside_a_pod"] and not seen["ran_beside"], seen
    assert _gpus_of_job(login, training) == set(range(GPUS))
    for job in old_jobs.values():
        wait_for(lambda: _runs(login, job) == ["PREEMPTED"], 60, f"placeholder {job} recorded PREEMPTED", interval=2)
    old_names = {pod["metadata"]["name"] for pod, _job in serving.values()}
    events = kube.get("events", "-n", APPS, "--field-selector", "reason=DeletedForSlurm")["items"]
    assert old_names <= {e["involvedObject"]["name"] for e in events}, (
        old_names, [(e["involvedObject"]["name"], e["message"]) for e in events])

    # Back in the queue: the Deployment's new pods get new placeholders, pending behind alice's job.
    def new_pods_waiting():
        pods = [p for p in _replicas(kube) if p["metadata"]["uid"] not in old_jobs]
        if len(pods) != 2 or any(p["spec"].get("nodeName") for p in pods):
            return None
        jobs = [_placeholder(login, p) for p in pods]
        return jobs if all(j and j[1] == "PENDING" and j[0] not in old_jobs.values() for j in jobs) else None
    waiting = wait_for(new_pods_waiting, 120, "two new replicas, their new placeholders pending", interval=2)
    assert all(_squeue(login, job_id, "%q") == "serving" for job_id, _state, _reason in waiting), waiting

    # alice's job ends: the new replicas run, each on the GPUs of its own job.
    login.sh(f"scancel {training}")
    running = wait_for(lambda: _placeholders_running(login, 2), 300, "the new replicas Ready on their placeholders", interval=3)
    assert not set(running) & set(old_jobs)
    for uid, (pod, job_id) in running.items():
        served = _served(login, pod)
        assert _devices(served) == _gpus_of_job(login, job_id) and served["job"] == job_id, (job_id, served)
    _never_double_booked(double_booking, pods=4)
    # and it looked while it mattered: the old pods running on their preempted, held placeholders
    assert old_names <= double_booking.pods_seen_held_by_epilog, double_booking.report()


def test_inference_preempts_a_scavenger_job_which_is_requeued_and_completes_later(login, double_booking, idle_pool):
    kube = login.kube
    # A scavenger job that checkpoints, as such jobs do: its second run only finishes up.
    resume = 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep 5; else sleep 900; fi'
    scavenger = login.sh(f"sbatch --parsable -p gpu --qos=scavenger --gres=gpu:{GPUS} --mem=256M --wrap {shlex.quote(resume)}"
                         ).strip().splitlines()[-1]
    wait_for(lambda: _squeue(login, scavenger) == "RUNNING", 120, f"scavenger job {scavenger} running", interval=2)
    assert _gpus_of_job(login, scavenger) == set(range(GPUS))

    # One inference replica (QOS serving, from its namespace's mapping) preempts it.
    kube.apply("\n---\n".join(yaml.safe_dump(d) for d in _inference(replicas=1)))
    ((pod, job_id),) = wait_for(lambda: _placeholders_running(login, 1), 300, "the replica Ready on its placeholder",
                                interval=3).values()
    served = _served(login, pod)
    assert _devices(served) == _gpus_of_job(login, job_id) and len(_devices(served)) == 2, served
    requeued = _as_admin(login, ["scontrol", "show", "job", scavenger])
    assert re.search(r"\bJobState=PENDING\b", requeued) and re.search(r"\bRestarts=1\b", requeued), requeued
    runs = _runs(login, scavenger)
    assert len(runs) == 2 and runs[0] in ("PREEMPTED", "REQUEUED") and runs[1] == "PENDING", runs

    # The inference scales to zero: its pod goes, its placeholder is released, and the
    # scavenger job runs again (after Slurm's requeue delay) and completes.
    kube.run("scale", "deployment", APP, "-n", APPS, "--replicas=0")
    wait_for(lambda: _runs(login, scavenger)[-1:] == ["COMPLETED"], 300, f"scavenger job {scavenger} completed", interval=3)
    assert len(_runs(login, scavenger)) == 2, _runs(login, scavenger)
    _never_double_booked(double_booking, pods=1)


def _outsider(name: str, node: str, gpu_resource: str) -> dict:
    """A pod of the default scheduler, in the bridged namespace, that tolerates the bridge's taint
    and asks the bridged node for a GPU outside Slurm: what a team might try to skip the queue."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": APPS},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"key": BRIDGE_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "sleep", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "8Mi"},
                                                   "limits": {"memory": "8Mi", gpu_resource: "1"}}}]}}


def test_a_pod_asking_for_gpus_outside_slurm_gets_none_of_the_bridged_ones(login, double_booking, idle_pool):
    """nvidia.com/gpu on the bridged node: the slurmd pod holds every one, so kube-scheduler finds
    none. kubeslurm.io/gpu without Slurm: kube-scheduler may bind it, but the kubeslurm device
    plugin refuses a pod Slurm did not place, so the kubelet fails it before it starts."""
    kube = login.kube
    node = login.pod(SLURMD)["spec"]["nodeName"]
    kube.apply("\n---\n".join(yaml.safe_dump(_outsider(name, node, resource)) for name, resource in
                              (("nvidia-outsider", "nvidia.com/gpu"), ("bridge-outsider", BRIDGE_GPU))))
    try:
        def unschedulable():
            pod = kube.get("pod", "nvidia-outsider", "-n", APPS)
            condition = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), {})
            return condition if condition.get("status") == "False" and "Insufficient nvidia.com/gpu" in condition.get(
                "message", "") else None
        wait_for(unschedulable, 60, "the nvidia.com/gpu pod unschedulable for want of GPUs", interval=2)

        def refused():
            pod = kube.get("pod", "bridge-outsider", "-n", APPS)
            return pod if pod["status"].get("phase") == "Failed" else None
        failed = wait_for(refused, 120, "the kubeslurm.io/gpu pod refused at admission", interval=2)
        assert failed["status"].get("reason") == "UnexpectedAdmissionError", failed["status"]
        # The plugin's reason, through the kubelet: no pod Slurm placed is waiting for GPUs there.
        assert "kubeslurm.io/gpu is given only to pods Slurm placed" in failed["status"].get("message", ""), failed["status"]
        assert not failed["status"].get("containerStatuses") or not any(
            "running" in (c.get("state") or {}) for c in failed["status"]["containerStatuses"]), failed["status"]
    finally:
        kube.run("delete", "pod", "nvidia-outsider", "bridge-outsider", "-n", APPS, "--ignore-not-found", "--wait=false",
                 check=False)
