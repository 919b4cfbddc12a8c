"""The operator deploys spec.bridge's device plugin: `kubeslurm run` with its own ServiceAccount and
deploy/rbac.yaml, told its image (KUBESLURM_DEVICE_PLUGIN_IMAGE, as deploy/operator.yaml and the
chart tell it), applies the plugin's ServiceAccount, Role, RoleBinding and DaemonSet for a bridged
cluster, owned by the SlurmCluster, and then leaves them alone (no write while nothing changes)."""

from __future__ import annotations

import json
import os
import time

import pytest

from kubeslurm.render.bridge.device_plugin import device_plugin_name

from .operator_process import OPERATOR_NAMESPACE, OPERATOR_USER, RBAC, REPO, OperatorProcess, eventually
from .test_operator import BRIDGE, as_yaml, changed, documents_in

pytestmark = pytest.mark.k8s

IMAGE = "localhost/kubeslurm/operator:0.1.0"
PLUGIN_KINDS = ("daemonsets", "serviceaccounts", "roles", "rolebindings")


@pytest.fixture(scope="module")
def operator_with_plugin_image(control_plane, tmp_path_factory):
    cp = control_plane
    cp.apply_crds(REPO / "crds")
    cp.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    cp.kubectl("apply", "-f", str(RBAC))
    workdir = tmp_path_factory.mktemp("operator")
    kubeconfig = cp.write_service_account_kubeconfig(OPERATOR_NAMESPACE, "kubeslurm-operator", workdir / "sa.kubeconfig")
    process = OperatorProcess(kubeconfig, workdir / "operator.log")
    os.environ["KUBESLURM_DEVICE_PLUGIN_IMAGE"] = IMAGE  # copied into the process's environment at start
    try:
        process.start()
    finally:
        del os.environ["KUBESLURM_DEVICE_PLUGIN_IMAGE"]
    try:
        yield process
    finally:
        process.stop()
        print("---- operator log ----\n" + process.log_tail(200))


def _get(cp, kind: str, name: str, namespace: str) -> dict:
    return json.loads(cp.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)


def test_a_bridged_cluster_gets_the_device_plugin_and_a_steady_one_no_writes(operator_with_plugin_image, control_plane, namespace):
    cp, operator = control_plane, operator_with_plugin_image
    docs = documents_in(namespace)
    docs[0] = changed(docs[0], ["spec", "bridge"], BRIDGE)
    cp.kubectl("apply", "-f", "-", input=as_yaml(docs))
    name = device_plugin_name("research")
    daemon_set = eventually(lambda: _get(cp, "daemonset", name, namespace), timeout=120, what="the device plugin DaemonSet")
    cluster_uid = _get(cp, "slurmcluster", "research", namespace)["metadata"]["uid"]
    for kind in ("serviceaccount", "role", "rolebinding", "daemonset"):
        owners = _get(cp, kind, name, namespace)["metadata"]["ownerReferences"]
        assert [(o["kind"], o["uid"]) for o in owners] == [("SlurmCluster", cluster_uid)], (kind, owners)
    (container,) = daemon_set["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["args"][:2] == ["--cluster=research", f"--namespace={namespace}"]
    assert _get(cp, "role", name, namespace)["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                                                          "resourceNames": ["research-bridge-placements"], "verbs": ["get"]}]

    def plugin_writes(mark):
        return [(w["verb"], w["requestURI"]) for w in cp.audit_writes(since=mark, user=OPERATOR_USER)
                if f"/namespaces/{namespace}/" in w["requestURI"] and any(f"/{k}" in w["requestURI"] for k in PLUGIN_KINDS)]

    mark = cp.audit_mark()
    time.sleep(4 * operator.resync_seconds + 1)
    assert plugin_writes(mark) == []

    # Drift is put back, as for every object the operator renders.
    cp.kubectl("-n", namespace, "patch", "daemonset", name, "--type=json",
               "-p", json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "evil:1"}]))
    eventually(lambda: _get(cp, "daemonset", name, namespace)["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE,
               timeout=60, what="the DaemonSet's image put back")

    # The bridge turned off: the operator deletes the four (by name: it lists none of these
    # kinds), says so in Events, and drops status.devicePluginDeployed; then it reads them no more.
    assert _get(cp, "slurmcluster", "research", namespace)["status"].get("devicePluginDeployed") is True
    docs[0] = changed(docs[0], ["spec", "bridge", "enabled"], False)
    cp.kubectl("apply", "-f", "-", input=as_yaml(docs))

    def gone():
        left = cp.kubectl("get", "daemonset,serviceaccount,role,rolebinding", name, "-n", namespace,
                          "--ignore-not-found", "-o", "name").stdout.split()
        return not left and "devicePluginDeployed" not in (_get(cp, "slurmcluster", "research", namespace).get("status") or {})
    eventually(gone, timeout=60, what="the device plugin's objects deleted and the record dropped")
    events = cp.kubectl("get", "events", "-n", namespace, "--field-selector", "reason=Pruned",
                        "-o", "jsonpath={.items[*].message}").stdout
    for kind in ("DaemonSet", "RoleBinding", "Role", "ServiceAccount"):
        assert f"deleted {kind} {name}: spec.bridge is off" in events, events
    mark = cp.audit_mark()
    time.sleep(2 * operator.resync_seconds + 1)
    reads = [w for w in cp.audit_writes(since=mark, user=OPERATOR_USER, verbs=("get", "list", "watch"))
             if f"/namespaces/{namespace}/" in w["requestURI"] and any(f"/{k}/" in w["requestURI"] for k in PLUGIN_KINDS)]
    assert reads == [], reads
