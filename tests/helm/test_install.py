"""The helm charts against the real API server of the k8s tier (etcd + kube-apiserver +
kube-controller-manager): server-side dry runs, then real install, upgrade and uninstall.

There is no kubelet in this tier, so the operator's pod stays Pending: nothing here waits for
pods (`helm install` without --wait). What runs is the API server's own validation (the CRDs'
schemas and CEL rules, built-in types, RBAC) and helm's release bookkeeping.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.k8s.operator_process import OperatorProcess, eventually

from .conftest import CLUSTER_CHART, OPERATOR_CHART, REPO

pytestmark = pytest.mark.helm


@pytest.fixture(scope="module")
def crds(control_plane):
    """The chart's CRDs, applied the way the README says (helm installs them only when absent)."""
    control_plane.apply_crds(OPERATOR_CHART / "crds")
    return control_plane


def kube_helm(helm, control_plane, *args, check=True):
    return helm(*args, "--kubeconfig", control_plane.kubeconfig_path, check=check)


def get(cp, *args) -> dict | None:
    result = cp.kubectl("get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    return json.loads(result.stdout)


def dry_run_server(cp, manifests: str, namespace: str) -> str:
    return cp.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=manifests).stdout


@pytest.mark.parametrize("chart", [OPERATOR_CHART, CLUSTER_CHART], ids=lambda c: c.name)
def test_template_passes_a_server_side_dry_run(helm, crds, namespace, chart):
    manifests = helm("template", "research", chart, "-n", namespace).stdout
    out = dry_run_server(crds, manifests, namespace)
    kinds = {doc["kind"] for doc in yaml.safe_load_all(manifests) if doc}
    assert out.count("(server dry run)") == sum(1 for d in yaml.safe_load_all(manifests) if d), out
    assert kinds == (
        {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"}
        if chart == OPERATOR_CHART else {"SlurmCluster", "NodeSet"}
    )


def test_the_api_server_refuses_what_only_it_checks(helm, crds, namespace):
    # replicas > maxReplicas is a CEL rule across two fields: the schema cannot say it, the CRD does
    manifests = helm(
        "template", "research", CLUSTER_CHART, "-n", namespace,
        "--set-json", 'nodeSets=[{"name": "cpu", "replicas": 8, "maxReplicas": 4}]',
    ).stdout
    result = crds.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=manifests, check=False)
    assert result.returncode != 0
    assert "replicas must not exceed maxReplicas" in result.stderr


def test_operator_chart_install_upgrade_uninstall(helm, crds, namespace):
    cp = crds
    # ClusterRole and ClusterRoleBinding are cluster-scoped: a release name of its own (the
    # k8s tier applies deploy/rbac.yaml's kubeslurm-operator in the same API server)
    name = f"{namespace}-kubeslurm-operator"
    install = kube_helm(helm, cp, "install", name, OPERATOR_CHART, "-n", namespace)
    assert "STATUS: deployed" in install.stdout
    assert "kubectl -n hpc exec research-login-0 -- sinfo" in install.stdout  # NOTES.txt

    deployment = get(cp, "deployment", name, "-n", namespace)
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert pod["containers"][0]["args"][:2] == ["run", "--log-format=json"]
    assert pod["serviceAccountName"] == name
    assert get(cp, "serviceaccount", name, "-n", namespace)
    service = get(cp, "service", f"{name}-metrics", "-n", namespace)
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("metrics", 9090, "metrics")]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    role = get(cp, "clusterrole", name)
    deploy_rules = next(d for d in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()) if d["kind"] == "ClusterRole")["rules"]
    assert role["rules"] == [{"apiGroups": r["apiGroups"], "resources": r["resources"], "verbs": r["verbs"]} for r in deploy_rules]
    binding = get(cp, "clusterrolebinding", name)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    # the ServiceAccount may do what the operator needs, and no more (spot checks)
    user = f"system:serviceaccount:{namespace}:{name}"
    for verb, resource, allowed in [
        ("patch", "slurmclusters.kubeslurm.io/status", "yes"), ("create", "pods/exec", "yes"),
        ("list", "secrets", "no"), ("delete", "persistentvolumeclaims", "no"), ("create", "pods", "no"),
        ("delete", "secrets", "no"), ("watch", "secrets", "no"),
    ]:
        sub = resource.split("/", 1)
        args = ["auth", "can-i", verb, sub[0], "--as", user, "-n", namespace]
        if len(sub) == 2:
            args += ["--subresource", sub[1]]
        assert cp.kubectl(*args, check=False).stdout.strip() == allowed, (verb, resource)

    generation = deployment["metadata"]["generation"]
    upgrade = kube_helm(
        helm, cp, "upgrade", name, OPERATOR_CHART, "-n", namespace, "--reuse-values",
        # a watched namespace must exist: it gets the operator's Role
        "--set", "logFormat=plain", "--set", "resources.limits.memory=1Gi", "--set", f"watchNamespaces={{{namespace}}}",
    )
    assert "REVISION: 2" in upgrade.stdout
    deployment = get(cp, "deployment", name, "-n", namespace)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["metadata"]["generation"] > generation
    assert container["args"] == ["run", "--log-format=plain", "--liveness=http://0.0.0.0:8080/healthz", "--metrics-port=9090",
                                 f"--namespace={namespace}"]
    assert get(cp, "role", name, "-n", namespace) and get(cp, "rolebinding", name, "-n", namespace)
    assert [rule["resources"] for rule in get(cp, "clusterrole", name)["rules"]] == [["nodes"]]
    assert container["resources"]["limits"]["memory"] == "1Gi"

    # a bad value is refused at upgrade and leaves the release as it was
    refused = kube_helm(helm, cp, "upgrade", name, OPERATOR_CHART, "-n", namespace, "--set", "logFormat=xml", check=False)
    assert refused.returncode != 0 and "/logFormat" in refused.stderr
    status = json.loads(kube_helm(helm, cp, "status", name, "-n", namespace, "-o", "json").stdout)
    assert (status["version"], status["info"]["status"]) == (2, "deployed")

    kube_helm(helm, cp, "uninstall", name, "-n", namespace)
    eventually(lambda: get(cp, "deployment", name, "-n", namespace) is None, timeout=30, what="Deployment deleted")
    assert get(cp, "serviceaccount", name, "-n", namespace) is None
    assert get(cp, "service", f"{name}-metrics", "-n", namespace) is None
    assert get(cp, "clusterrole", name) is None
    assert get(cp, "clusterrolebinding", name) is None
    # helm never deletes what it installed from crds/: the custom resources of every cluster live on
    for crd in ("slurmclusters.kubeslurm.io", "nodesets.kubeslurm.io"):
        assert get(cp, "crd", crd)
    assert kube_helm(helm, cp, "list", "-n", namespace, "-q").stdout.strip() == ""


def test_cluster_chart_install_creates_the_cluster_and_its_node_sets(helm, crds, namespace, tmp_path):
    cp = crds
    install = kube_helm(helm, cp, "install", "research", CLUSTER_CHART, "-n", namespace)
    assert f"kubectl -n {namespace} exec research-login-0 -- sinfo" in install.stdout  # NOTES.txt
    assert "with NodeSets: h100 (2 nodes), cpu (1 node)." in install.stdout
    cluster = get(cp, "slurmcluster", "research", "-n", namespace)
    example = {d["metadata"]["name"]: d for d in yaml.safe_load_all((REPO / "examples" / "research.yaml").read_text())}
    # the API server filled in the CRD's defaults: every value given is kept as given
    assert cluster["spec"]["partitions"][0] | example["research"]["spec"]["partitions"][0] == cluster["spec"]["partitions"][0]
    assert cluster["spec"]["accounts"][1]["limits"] == {"maxGPUs": 16}
    for name in ("h100", "cpu"):
        node_set = get(cp, "nodeset", name, "-n", namespace)
        assert node_set["spec"]["clusterName"] == "research"
        assert node_set["spec"]["replicas"] == example[name]["spec"]["replicas"]

    # `kubectl scale` survives an upgrade that leaves that NodeSet's replicas value alone
    # (helm patches custom resources with the difference between the two releases' manifests)
    cp.kubectl("scale", "nodeset", "h100", "--replicas=5", "-n", namespace)
    kube_helm(helm, cp, "upgrade", "research", CLUSTER_CHART, "-n", namespace, "--reuse-values", "--set", "cluster.login.replicas=2")
    assert get(cp, "slurmcluster", "research", "-n", namespace)["spec"]["login"]["replicas"] == 2
    assert get(cp, "nodeset", "h100", "-n", namespace)["spec"]["replicas"] == 5

    # a changed value reaches the NodeSet; a removed NodeSet is deleted by helm
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"nodeSets": [{"name": "h100", "replicas": 3, "resources": {"cpu": "8", "memory": "32Gi"},
                                                    "gpus": {"count": 8, "type": "h100"}}],
                                      "cluster": {"partitions": [{"name": "gpu", "nodeSets": ["h100"], "default": True}]}}))
    kube_helm(helm, cp, "upgrade", "research", CLUSTER_CHART, "-n", namespace, "-f", values)
    assert get(cp, "nodeset", "h100", "-n", namespace)["spec"]["replicas"] == 3
    eventually(lambda: get(cp, "nodeset", "cpu", "-n", namespace) is None, timeout=30, what="NodeSet cpu deleted")
    assert [p["name"] for p in get(cp, "slurmcluster", "research", "-n", namespace)["spec"]["partitions"]] == ["gpu"]

    kube_helm(helm, cp, "uninstall", "research", "-n", namespace)
    eventually(lambda: get(cp, "slurmcluster", "research", "-n", namespace) is None, timeout=30, what="SlurmCluster deleted")
    assert get(cp, "nodeset", "h100", "-n", namespace) is None


def test_cluster_chart_install_refuses_bad_values_and_creates_nothing(helm, crds, namespace):
    result = kube_helm(helm, crds, "install", "research", CLUSTER_CHART, "-n", namespace,
                       "--set-json", 'nodeSets=[{"name": "GPU"}]', check=False)
    assert result.returncode != 0 and "/nodeSets/0/name" in result.stderr
    assert crds.kubectl("get", "slurmclusters,nodesets", "-n", namespace, "-o", "name").stdout.strip() == ""
    assert kube_helm(helm, crds, "list", "-n", namespace, "-a", "-q").stdout.strip() == ""


def can_i(cp, user: str, verb: str, resource: str, namespace: str | None) -> str:
    kind, _, subresource = resource.partition("/")
    args = ["auth", "can-i", verb, kind, "--as", user]
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    if subresource:
        args += ["--subresource", subresource]
    return cp.kubectl(*args, check=False).stdout.strip()


def test_operator_watching_one_namespace_runs_under_roles_there_only(helm, crds, namespace, tmp_path):
    """watchNamespaces: Roles in the watched namespace, nothing namespaced cluster-wide; the operator,
    run as that ServiceAccount with that --namespace, reconciles a cluster there all the same."""
    cp = crds
    elsewhere = f"{namespace}-elsewhere"
    cp.kubectl("create", "namespace", elsewhere)
    name = f"{namespace}-kubeslurm-operator"
    kube_helm(helm, cp, "install", name, OPERATOR_CHART, "-n", namespace, "--set", f"watchNamespaces={{{namespace}}}")
    user = f"system:serviceaccount:{namespace}:{name}"
    process = None
    try:
        assert get(cp, "role", name, "-n", namespace) and get(cp, "rolebinding", name, "-n", namespace)
        for verb, resource, where, allowed in [
            ("get", "secrets", namespace, "yes"), ("create", "pods/exec", namespace, "yes"),
            ("get", "secrets", elsewhere, "no"), ("create", "pods/exec", elsewhere, "no"), ("patch", "statefulsets", elsewhere, "no"),
            ("get", "secrets", None, "no"), ("list", "slurmclusters.kubeslurm.io", None, "no"),
            ("delete", "secrets", namespace, "no"), ("list", "secrets", namespace, "no"),
            ("list", "nodes", None, "yes"), ("watch", "nodes", None, "yes"), ("patch", "nodes", None, "no"),
            ("list", "namespaces", None, "no"), ("list", "customresourcedefinitions", None, "no"),
        ]:
            assert can_i(cp, user, verb, resource, where) == allowed, (verb, resource, where)

        kubeconfig = cp.write_service_account_kubeconfig(namespace, name, tmp_path / "sa.kubeconfig")
        process = OperatorProcess(kubeconfig, tmp_path / "operator.log", namespaces=(namespace,))
        process.start()
        example = [d for d in yaml.safe_load_all((REPO / "examples" / "research.yaml").read_text()) if d]
        for where in (namespace, elsewhere):
            for doc in example:
                doc["metadata"]["namespace"] = where
            cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(example))

        def reconciled():
            conditions = (get(cp, "slurmcluster", "research", "-n", namespace) or {}).get("status", {}).get("conditions") or []
            return {c["type"]: c for c in conditions}.get("Ready")

        ready = eventually(reconciled, timeout=90, what="status of the watched cluster")
        assert (ready["status"], ready["reason"]) == ("False", "SlurmNotAnswering"), ready  # no kubelet in this tier
        cluster = get(cp, "slurmcluster", "research", "-n", namespace)
        assert {c["type"]: c["status"] for c in cluster["status"]["conditions"]}["Degraded"] == "False", cluster["status"]
        for kind, object_name in [("statefulset", "research-controller"), ("statefulset", "h100"), ("secret", "research-auth-key"),
                                  ("secret", "research-slurmdbd-config"), ("pvc", "research-controller-state")]:
            assert get(cp, kind, object_name, "-n", namespace), (kind, object_name)
        assert get(cp, "nodeset", "h100", "-n", namespace)["metadata"].get("ownerReferences")
        # the namespace it does not watch is left alone
        assert get(cp, "statefulset", "research-controller", "-n", elsewhere) is None
        assert not get(cp, "slurmcluster", "research", "-n", elsewhere).get("status")
        assert "Forbidden" not in process.log_tail(400), process.log_tail(400)  # it asks for nothing it may not do
    finally:
        if process is not None:
            process.stop()
            print("---- operator log ----\n" + process.log_tail(200))
        kube_helm(helm, cp, "uninstall", name, "-n", namespace, check=False)
        cp.kubectl("delete", "namespace", elsewhere, "--wait=false", check=False)
