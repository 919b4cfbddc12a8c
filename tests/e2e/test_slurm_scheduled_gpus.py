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
"""

from __future__ import annotations

import re

import pytest
import yaml

from kubeslurm.api.bridge import scheduler_name
from kubeslurm.device_plugin.server import RESOURCE as BRIDGE_GPU
from testbed import deployment
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


def _inference() -> list[dict]:
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
         "spec": {"replicas": 2, "selector": {"matchLabels": labels},
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
        with demo_variant(client, NAMESPACE, bridged_only(
                "h100", "gpu", APPS, ACCOUNT, USER,
                {"resources": {"cpu": "2", "memory": "2Gi"}, "gpus": {"count": GPUS, "type": "h100"}})) as researcher:
            yield researcher
    finally:
        client.run("delete", "namespace", APPS, "--ignore-not-found", "--wait=false", check=False)
        deployment.release_bridged_nodes(client)


def _as_admin(login, argv: list[str]) -> str:
    return login.kube.exec(NAMESPACE, LOGIN, "login", argv).stdout


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


def test_slurm_gives_training_and_inference_disjoint_gpus_and_the_next_replica_waits_in_slurm(login):
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
