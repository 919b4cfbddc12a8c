"""The real-API-server fixture itself: TLS, RBAC, controllers, audit log."""

from __future__ import annotations

import json

import pytest

from testbed.control_plane import pinned_kubernetes_version
from testbed.waiting import wait_for

pytestmark = pytest.mark.k8s



def get_json(cp, *args, **kwargs):
    return json.loads(cp.kubectl("get", *args, "-o", "json", **kwargs).stdout)


def exists(cp, *args) -> bool:
    return cp.kubectl("get", *args, check=False).returncode == 0


def test_apiserver_is_ready(control_plane):
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_kubectl_and_server_report_the_pinned_version(control_plane):
    versions = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    pinned = pinned_kubernetes_version()
    assert versions["clientVersion"]["gitVersion"] == pinned
    assert versions["serverVersion"]["gitVersion"] == pinned
    assert control_plane.bin_dir.name == "bin" and control_plane.bin_dir.parent.name == pinned


def test_official_python_client_works_with_the_admin_kubeconfig(control_plane):
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig_path))
    with api:
        names = [ns.metadata.name for ns in kubernetes.client.CoreV1Api(api).list_namespace().items]
    assert {"default", "kube-system"} <= set(names)


def test_service_account_kubeconfig_is_limited_to_its_role(control_plane, namespace, tmp_path):
    cp = control_plane
    cp.kubectl("create", "serviceaccount", "robot", "-n", namespace)
    cp.kubectl(
        "create", "role", "configmap-editor", "-n", namespace,
        "--verb=get,list,create,delete", "--resource=configmaps",
    )
    cp.kubectl(
        "create", "rolebinding", "robot-edits-configmaps", "-n", namespace,
        "--role=configmap-editor", f"--serviceaccount={namespace}:robot",
    )
    kubeconfig = cp.write_service_account_kubeconfig(namespace, "robot", tmp_path / "robot.kubeconfig")

    whoami = json.loads(cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:robot"

    cp.kubectl("create", "configmap", "allowed", "-n", namespace, "--from-literal=a=b", kubeconfig=kubeconfig)
    assert get_json(cp, "configmap", "allowed", "-n", namespace, kubeconfig=kubeconfig)["data"] == {"a": "b"}

    for forbidden in (
        ("get", "secrets", "-n", namespace),
        ("get", "configmaps", "-n", "default"),
        ("create", "secret", "generic", "nope", "-n", namespace, "--from-literal=a=b"),
        ("get", "namespaces"),
    ):
        result = cp.kubectl(*forbidden, kubeconfig=kubeconfig, check=False)
        assert result.returncode != 0, forbidden
        assert "forbidden" in result.stderr.lower(), result.stderr


def test_garbage_collector_deletes_dependents(control_plane, namespace):
    cp = control_plane
    cp.kubectl("create", "configmap", "owner", "-n", namespace)
    uid = get_json(cp, "configmap", "owner", "-n", namespace)["metadata"]["uid"]
    cp.kubectl(
        "apply", "-n", namespace, "-f", "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "owned",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
                    ],
                },
            }
        ),
    )
    cp.kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_for(lambda: not exists(cp, "configmap", "owned", "-n", namespace),
             what="the garbage collector to delete the dependent ConfigMap")


def test_deployment_controller_creates_replicaset_and_pods(control_plane, namespace):
    cp = control_plane
    # The ServiceAccount admission plugin rejects pods until the ServiceAccount
    # controller has made the namespace's default ServiceAccount.
    wait_for(lambda: exists(cp, "serviceaccount", "default", "-n", namespace),
             what="ServiceAccount default")
    cp.kubectl("create", "deployment", "web", "-n", namespace, "--image=registry.invalid/web:1", "--replicas=2")

    def replicasets():
        return get_json(cp, "replicasets", "-n", namespace, "-l", "app=web")["items"]

    (rs,) = wait_for(replicasets, what="a ReplicaSet of Deployment web")
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    def pods():
        items = get_json(cp, "pods", "-n", namespace, "-l", "app=web")["items"]
        return items if len(items) == 2 else None

    for pod in wait_for(pods, what="two pods of ReplicaSet web"):
        assert pod["metadata"]["ownerReferences"][0]["name"] == rs["metadata"]["name"]
        # No scheduler in this tier: pods stay Pending, unbound.
        assert pod["status"]["phase"] == "Pending"
        assert not pod["spec"].get("nodeName")


def test_service_account_controllers_run(control_plane, namespace):
    cp = control_plane
    wait_for(lambda: exists(cp, "serviceaccount", "default", "-n", namespace),
             what="ServiceAccount default")
    # --root-ca-file: the root CA publisher puts our CA into every namespace.
    ca = wait_for(
        lambda: exists(cp, "configmap", "kube-root-ca.crt", "-n", namespace)
        and get_json(cp, "configmap", "kube-root-ca.crt", "-n", namespace)["data"]["ca.crt"],
        what="ConfigMap kube-root-ca.crt",
    )
    assert ca == (cp.pki / "ca.crt").read_text()
    # --service-account-private-key-file: the token controller fills in a
    # legacy token Secret.
    cp.kubectl(
        "apply", "-n", namespace, "-f", "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {"name": "default-token", "annotations": {"kubernetes.io/service-account.name": "default"}},
            }
        ),
    )
    wait_for(lambda: get_json(cp, "secret", "default-token", "-n", namespace).get("data", {}).get("token"),
             what="the token controller to fill Secret default-token")


def test_audit_log_counts_writes_by_user(control_plane, namespace, tmp_path):
    cp = control_plane
    cp.kubectl("create", "serviceaccount", "writer", "-n", namespace)
    cp.kubectl("create", "rolebinding", "writer-edit", "-n", namespace,
               "--clusterrole=edit", f"--serviceaccount={namespace}:writer")
    kubeconfig = cp.write_service_account_kubeconfig(namespace, "writer", tmp_path / "writer.kubeconfig")
    user = f"system:serviceaccount:{namespace}:writer"

    mark = cp.audit_mark()
    cp.kubectl("create", "configmap", "one", "-n", namespace, kubeconfig=kubeconfig)
    cp.kubectl("label", "configmap", "one", "-n", namespace, "x=y", kubeconfig=kubeconfig)
    cp.kubectl("get", "configmap", "one", "-n", namespace, kubeconfig=kubeconfig)  # a read: not logged
    cp.kubectl("delete", "configmap", "one", "-n", namespace, kubeconfig=kubeconfig)
    cp.kubectl("create", "configmap", "by-admin", "-n", namespace)

    writes = wait_for(lambda: (w := cp.audit_writes(since=mark, user=user)) and len(w) >= 3 and w,
                      timeout=10, what="three audited writes")
    assert [(w["verb"], w["objectRef"]["resource"], w["objectRef"]["name"]) for w in writes] == [
        ("create", "configmaps", "one"),
        ("patch", "configmaps", "one"),
        ("delete", "configmaps", "one"),
    ]
    assert all(w["responseStatus"]["code"] < 300 for w in writes)
    # The admin's write is logged too, and was filtered out above.
    wait_for(lambda: any(w["objectRef"].get("name") == "by-admin" for w in cp.audit_writes(since=mark)),
             timeout=10, what="the admin's write in the audit log")
