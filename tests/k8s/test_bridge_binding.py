"""The Kubernetes half of placing a Slurm-scheduled pod, against the real API server.

No kube-scheduler runs in this tier, so a pod with `schedulerName: kubeslurm-<cluster>` stays
unbound unless kubeslurm binds it. Shown here with the bridge's own builders and KubeApi calls:
the pod shows Slurm's pending reason in its PodScheduled condition (and the bridge's decision,
reading it back, writes it no second time); the Binding places it on the allocated node; a
Binding made for another pod of the same name (a stale UID) is refused, and so is a second one.
"""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes.client.rest import ApiException

from kubeslurm.api.bridge import BridgedNamespace, scheduler_name
from kubeslurm.reconcile.bridge_plan import PlaceholderState, plan_bridge
from kubeslurm.reconcile.bridge_pods import bridged_pod
from kubeslurm.reconcile.kube_api import KubeApi, load_api_client
from kubeslurm.ownership import POD
from kubeslurm.render.bridge.pod_binding import PENDING_REASON, binding, pending_condition_patch

pytestmark = pytest.mark.k8s


@pytest.fixture
def kube(control_plane):
    return KubeApi(load_api_client(str(control_plane.kubeconfig_path)))


@pytest.fixture
def node(control_plane):
    name = f"bridge-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
    yield name
    control_plane.kubectl("delete", "node", name, "--wait=false", check=False)


def server_pod(kube, namespace) -> dict:
    return kube.create({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server-0", "namespace": namespace},
        "spec": {"schedulerName": scheduler_name("research"), "containers": [{
            "name": "server", "image": "registry.example/server:1",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
    })


def test_a_waiting_pod_shows_slurm_s_reason_once_and_is_bound_to_its_node(kube, namespace, node):
    mapping = BridgedNamespace(namespace=namespace, account="serving", user="svc-serving")
    created = server_pod(kube, namespace)
    uid = created["metadata"]["uid"]
    job = PlaceholderState("812", "PENDING", uid, (), "Resources")

    (pod, message), = plan_bridge([bridged_pod(created, mapping)], [job], {}).pending
    assert message == "Slurm job 812 pending: Resources"
    kube.patch_pod_status(namespace, "server-0", pending_condition_patch(message, "2026-12-03T17:00:00Z"))
    live = kube.get(POD, namespace, "server-0")
    scheduled = [c for c in live["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [(c["status"], c["reason"], c["message"]) for c in scheduled] == [("False", PENDING_REASON, message)]
    assert plan_bridge([bridged_pod(live, mapping)], [job], {}).empty  # shown already: no second write

    running = PlaceholderState("812", "RUNNING", uid, ("gpu-0",), "None")
    (placement,) = plan_bridge([bridged_pod(live, mapping)], [running], {"gpu-0": node}).bind
    kube.bind(namespace, binding("server-0", placement.pod.uid, placement.kubernetes_node))
    bound = kube.get(POD, namespace, "server-0")
    assert bound["spec"]["nodeName"] == node
    assert plan_bridge([bridged_pod(bound, mapping)], [running], {"gpu-0": node}).empty

    with pytest.raises(ApiException) as again:
        kube.bind(namespace, binding("server-0", uid, node))
    assert again.value.status == 409, again.value


def test_a_binding_for_an_older_pod_of_the_same_name_is_refused(kube, namespace, node):
    stale_uid = str(uuid.uuid4())  # the UID of a pod deleted and re-created under this name
    server_pod(kube, namespace)
    with pytest.raises(ApiException) as refused:
        kube.bind(namespace, binding("server-0", stale_uid, node))
    assert refused.value.status == 409, refused.value
    assert not kube.get(POD, namespace, "server-0")["spec"].get("nodeName")
