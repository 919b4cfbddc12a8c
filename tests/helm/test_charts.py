"""The helm charts, offline: lint, what `helm template` renders, and values that are refused."""

from __future__ import annotations

import json
import tomllib

import pytest
import yaml

from charts import sync_from_crds
from kubeslurm.api import load_documents

from .conftest import CLUSTER_CHART, OPERATOR_CHART, REPO

pytestmark = pytest.mark.helm

CHARTS = [OPERATOR_CHART, CLUSTER_CHART]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict], kind: str) -> dict:
    (found,) = by_kind(objects, kind)
    return found


def repo_documents(path) -> list[dict]:
    return [d for d in yaml.safe_load_all((REPO / path).read_text()) if d]


# ---------------------------------------------------------------- both charts


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.name)
def test_lint_strict(helm, chart):
    result = helm("lint", "--strict", chart)
    assert "0 chart(s) failed" in result.stdout


def test_helm_reports_its_pinned_version(helm):
    # testbed/helm/build.sh sets the version ldflag: `helm version` is the go.mod requirement
    requirements = [line.split() for line in (REPO / "testbed" / "helm" / "go.mod").read_text().splitlines()]
    (pinned,) = [words[-1] for words in requirements if "helm.sh/helm/v3" in words]
    assert helm("version", "--short").stdout.strip() == pinned


def test_versions_follow_the_operator():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for chart in CHARTS:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        assert meta["appVersion"] == version, f"{chart}/Chart.yaml appVersion is not pyproject's {version}"


def test_charts_are_in_step_with_crds():
    # the CRD copies and the slurm-cluster schema are written by `make crds`
    assert sync_from_crds.main(["--check"]) == 0, "run `make crds`"
    for crd in sorted((REPO / "crds").glob("*.yaml")):
        copy = OPERATOR_CHART / "crds" / crd.name
        assert copy.read_bytes() == crd.read_bytes(), f"{copy} differs from {crd}: run `make crds`"
    assert sorted(p.name for p in (OPERATOR_CHART / "crds").iterdir()) == sorted(
        p.name for p in (REPO / "crds").glob("*.yaml")
    )


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.name)
def test_values_schema_is_strict(chart):
    schema = json.loads((chart / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"]), "every default value is described by the schema"


# ---------------------------------------------------------------- the operator chart


def test_operator_chart_renders_crds_identical_to_the_repo(helm):
    objects = helm.template("kubeslurm", OPERATOR_CHART, "--include-crds", "-n", "kubeslurm-system")
    rendered = sorted(by_kind(objects, "CustomResourceDefinition"), key=lambda c: c["metadata"]["name"])
    expected = sorted(
        (d for path in sorted((REPO / "crds").glob("*.yaml")) for d in repo_documents(path)),
        key=lambda c: c["metadata"]["name"],
    )
    assert rendered == expected


def test_operator_chart_rbac_is_deploy_rbac(helm):
    objects = helm.template("kubeslurm", OPERATOR_CHART, "-n", "ops")
    deploy = repo_documents("deploy/rbac.yaml")
    assert one(objects, "ClusterRole")["rules"] == one(deploy, "ClusterRole")["rules"]

    name = "kubeslurm-kubeslurm-operator"
    account = one(objects, "ServiceAccount")["metadata"]
    assert (account["name"], account["namespace"]) == (name, "ops")
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "ops"}]
    assert one(objects, "ClusterRole")["metadata"]["name"] == name
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == name


def test_operator_chart_rbac_for_watched_namespaces_is_namespaced(helm, tmp_path):
    """With watchNamespaces, every rule on namespaced objects (Secrets, pods/exec, ...) is a Role in a
    watched namespace; cluster-wide only nodes, read-only (kopf does not scan CRDs with --namespace).
    With deploy/rbac.yaml's rule on CRDs: deploy/rbac.yaml's rules."""
    objects = _template_with_values(helm, OPERATOR_CHART, {"watchNamespaces": ["hpc", "research"]}, tmp_path, "kubeslurm", "ops")
    name = "kubeslurm-kubeslurm-operator"
    deploy_rules = one(repo_documents("deploy/rbac.yaml"), "ClusterRole")["rules"]
    cluster_rules = one(objects, "ClusterRole")["rules"]
    assert [rule["resources"] for rule in cluster_rules] == [["nodes"]]
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"} for rule in cluster_rules)
    roles, bindings = by_kind(objects, "Role"), by_kind(objects, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(b["metadata"]["namespace"] for b in bindings) == ["hpc", "research"]
    for role in roles:
        assert role["metadata"]["name"] == name
        assert role["rules"] + [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                                 "verbs": ["list", "watch"]}] + cluster_rules == deploy_rules
    for binding in bindings:
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "ops"}]
    assert one(objects, "ClusterRoleBinding")["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "ops"}]


def test_operator_rbac_grants_no_verb_the_operator_does_not_use():
    """Secrets are never listed, watched or deleted; status is patched, never read; nodes only read;
    bridged pods only bound and their status patched."""
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in one(repo_documents("deploy/rbac.yaml"), "ClusterRole")["rules"]}
    assert rules[("secrets",)] == {"get", "create", "patch"}
    assert rules[("persistentvolumeclaims",)] == {"get", "create", "patch"}
    assert rules[("slurmclusters/status", "nodesets/status")] == {"patch"}
    assert rules[("nodes",)] == {"list", "watch"}
    assert rules[("events",)] == {"create"}
    # Slurm-scheduled pods: placed through the Binding subresource, their wait said in status; nothing more
    assert rules[("pods/binding",)] == {"create"}
    assert rules[("pods/status",)] == {"patch"}


def test_operator_chart_deployment_is_deploy_operator_by_default(helm):
    objects = helm.template("kubeslurm-operator", OPERATOR_CHART, "-n", "kubeslurm-system")
    assert sorted(o["kind"] for o in objects) == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"]
    rendered = one(objects, "Deployment")
    expected = one(repo_documents("deploy/operator.yaml"), "Deployment")
    assert rendered["metadata"]["name"] == "kubeslurm-operator"  # the release name contains the chart name
    assert rendered["spec"]["replicas"] == 1
    assert rendered["spec"]["strategy"] == {"type": "Recreate"}
    pod, expected_pod = rendered["spec"]["template"]["spec"], expected["spec"]["template"]["spec"]
    assert pod["securityContext"] == expected_pod["securityContext"]
    assert pod["containers"] == expected_pod["containers"]
    assert pod["containers"][0]["args"] == [
        "run", "--log-format=json", "--liveness=http://0.0.0.0:8080/healthz", "--metrics-port=9090"]
    service, expected_service = one(objects, "Service"), one(repo_documents("deploy/operator.yaml"), "Service")
    assert service["metadata"]["name"] == expected_service["metadata"]["name"] == "kubeslurm-operator-metrics"
    assert service["spec"]["ports"] == expected_service["spec"]["ports"]
    assert service["spec"]["selector"].items() <= rendered["spec"]["template"]["metadata"]["labels"].items()
    selector = rendered["spec"]["selector"]["matchLabels"]
    assert selector.items() <= rendered["spec"]["template"]["metadata"]["labels"].items()


def test_operator_chart_values_reach_the_deployment(helm, tmp_path):
    values = {
        "image": {"repository": "registry.example.com/kubeslurm/operator", "tag": "0.2.0", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "pull"}],
        "watchNamespaces": ["hpc", "research"],
        "logFormat": "plain",
        "verbose": True,
        "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}},
        "podAnnotations": {"example.com/a": "b"},
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "infra", "operator": "In", "values": ["yes"]}]}]}}},
        "fullnameOverride": "kso",
        "devicePlugin": {"deviceDir": "/var/lib/kubeslurm-cluster/nodes/kubeslurm-1/dev", "kubeletPluginDir": "/srv/kubelet/device-plugins"},
    }
    objects = _template_with_values(helm, OPERATOR_CHART, values, tmp_path)
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/kubeslurm/operator:0.2.0"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == [
        "run", "--log-format=plain", "--liveness=http://0.0.0.0:8080/healthz", "--metrics-port=9090",
        "--namespace=hpc", "--namespace=research", "--verbose",
    ]
    # helm merges maps into the defaults key by key (null drops a default key)
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert pod["tolerations"] == values["tolerations"]
    assert pod["affinity"] == values["affinity"]
    assert deployment["spec"]["template"]["metadata"]["annotations"] == values["podAnnotations"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBESLURM_DEVICE_PLUGIN_IMAGE"] == "registry.example.com/kubeslurm/operator:0.2.0"
    assert env["KUBESLURM_DEVICE_PLUGIN_DEVICE_DIR"] == "/var/lib/kubeslurm-cluster/nodes/kubeslurm-1/dev"
    assert env["KUBESLURM_DEVICE_PLUGIN_KUBELET_DIR"] == "/srv/kubelet/device-plugins"
    assert {o["metadata"]["name"] for o in objects} == {"kso", "kso-metrics"}


def test_operator_chart_service_monitor_only_when_asked_and_pointing_at_the_metrics_port(helm, tmp_path):
    objects = helm.template("kubeslurm", OPERATOR_CHART, "-n", "ops")
    assert by_kind(objects, "ServiceMonitor") == []
    values = {"metrics": {"port": 9191, "service": {"annotations": {"example.com/a": "b"}},
                          "serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "5s",
                                             "labels": {"release": "kube-prometheus-stack"}}}}
    objects = _template_with_values(helm, OPERATOR_CHART, values, tmp_path, "kubeslurm", "ops")
    monitor, service, deployment = one(objects, "ServiceMonitor"), one(objects, "Service"), one(objects, "Deployment")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == "ops"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "5s"}]
    assert service["metadata"]["annotations"] == {"example.com/a": "b"}
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9191, "targetPort": "metrics", "protocol": "TCP"}]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--metrics-port=9191" in container["args"]
    assert {"name": "metrics", "containerPort": 9191} in container["ports"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_operator_chart_without_metrics_serves_none_and_monitors_nothing(helm, tmp_path):
    values = {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}
    objects = _template_with_values(helm, OPERATOR_CHART, values, tmp_path, "kubeslurm", "ops")
    assert by_kind(objects, "Service") == by_kind(objects, "ServiceMonitor") == []
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--metrics-port=0" in container["args"]
    assert [port["name"] for port in container["ports"]] == ["health"]


def _template_with_values(helm, chart, values: dict, tmp_path, release: str = "x", namespace: str = "a") -> list[dict]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return helm.template(release, chart, "-n", namespace, "-f", path)


# ---------------------------------------------------------------- the slurm-cluster chart


def test_cluster_chart_defaults_are_examples_research(helm):
    objects = helm.template("research", CLUSTER_CHART, "-n", "hpc")
    example = repo_documents("examples/research.yaml")

    def key(o):
        return (o["kind"], o["metadata"]["name"])

    assert sorted(map(key, objects)) == sorted(map(key, example))
    for rendered in objects:
        (expected,) = [e for e in example if key(e) == key(rendered)]
        assert rendered["apiVersion"] == expected["apiVersion"]
        assert rendered["metadata"]["namespace"] == "hpc"
        assert rendered["spec"] == expected["spec"], key(rendered)
        assert rendered["metadata"]["labels"]["app.kubernetes.io/instance"] == "research"

    manifests = load_documents(objects, "helm template")  # the operator's own models accept it
    assert [c.metadata.name for c in manifests.clusters] == ["research"]
    assert sorted(n.metadata.name for n in manifests.node_sets) == ["cpu", "h100"]


def test_cluster_chart_in_another_namespace_and_name(helm, tmp_path):
    values = {
        "clusterName": "vision",
        "cluster": {"accounting": {"enabled": False}, "accounts": [], "partitions": [{"name": "batch", "nodeSets": ["a100"]}],
                    "scheduling": {"fairShare": {"enabled": False}}},
        "nodeSets": [{"name": "a100", "replicas": 4, "maxReplicas": 16, "resources": {"cpu": 16, "memory": "64Gi"},
                      "gpus": {"count": 4, "type": "a100"}, "nodeSelector": {"gpu": "a100"},
                      "tolerations": [{"key": "gpu", "operator": "Exists"}], "updateStrategy": {"type": "RollingUpdate"}}],
    }
    objects = _template_with_values(helm, CLUSTER_CHART, values, tmp_path, release="rel", namespace="team-a")
    cluster = one(objects, "SlurmCluster")
    assert cluster["metadata"] == {**cluster["metadata"], "name": "vision", "namespace": "team-a"}
    assert cluster["spec"]["accounting"] == {"enabled": False, "database": {"internal": {"size": "2Gi"}}}
    (node_set,) = by_kind(objects, "NodeSet")
    assert node_set["metadata"]["name"] == "a100"
    assert node_set["spec"] == {"clusterName": "vision", **{k: v for k, v in values["nodeSets"][0].items() if k != "name"}}
    load_documents(objects, "helm template")


def test_cluster_chart_external_database_by_nulling_the_default(helm):
    objects = helm.template(
        "research", CLUSTER_CHART, "-n", "hpc",
        "--set", "cluster.accounting.database.internal=null",
        "--set", "cluster.accounting.database.external.host=db.example.com",
        "--set", "cluster.accounting.database.external.passwordSecretRef.name=slurm-db",
    )
    database = one(objects, "SlurmCluster")["spec"]["accounting"]["database"]
    assert database == {"external": {"host": "db.example.com", "passwordSecretRef": {"name": "slurm-db"}}}
    load_documents(objects, "helm template")


def test_cluster_chart_reads_users_from_the_directory(helm):
    objects = helm.template(
        "research", CLUSTER_CHART, "-n", "hpc", "--set", "cluster.identity.mode=ldap",
        "--set-json", 'cluster.identity.ldap={"uris": ["ldaps://ldap.example.org"], "searchBase": "dc=example,dc=org", '
                      '"caCertificate": {"configMap": {"name": "site-ca"}}, "loginGroups": ["hpc users"]}',
    )
    identity = one(objects, "SlurmCluster")["spec"]["identity"]
    assert identity["mode"] == "ldap" and identity["ldap"]["loginGroups"] == ["hpc users"]
    (cluster,) = load_documents(objects, "helm template").clusters
    assert cluster.spec.identity.ldap.ca_certificate.ref.name == "site-ca"


# ---------------------------------------------------------------- refused values

REFUSED = [
    # (chart, helm arguments, what the message must name)
    (OPERATOR_CHART, ["--set", "replicaCount=2"], "'replicaCount' not allowed"),
    (OPERATOR_CHART, ["--set", "logFormat=xml"], "/logFormat"),
    (OPERATOR_CHART, ["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
    (OPERATOR_CHART, ["--set", "watchNamespaces=hpc"], "/watchNamespaces"),
    (OPERATOR_CHART, ["--set", "watchNamespaces={Hpc}"], "/watchNamespaces/0"),
    (OPERATOR_CHART, ["--set", "resources.limits.memory=lots"], "/resources/limits/memory"),
    (OPERATOR_CHART, ["--set", "resources.limts.memory=1Gi"], "'limts' not allowed"),
    (OPERATOR_CHART, ["--set", "metrics.port=8080"], "/metrics/port"),
    (OPERATOR_CHART, ["--set", "metrics.port=70000"], "/metrics/port"),
    (OPERATOR_CHART, ["--set", "metrics.serviceMonitor.interval=30"], "/metrics/serviceMonitor/interval"),
    (OPERATOR_CHART, ["--set", "metrics.serviceMonitor.enable=true"], "'enable' not allowed"),
    (OPERATOR_CHART, ["--set", "devicePlugin.deviceDir=dev"], "/devicePlugin/deviceDir"),
    (OPERATOR_CHART, ["--set", "devicePlugin.deviceDir=/dev/../etc"], "/devicePlugin/deviceDir"),
    (OPERATOR_CHART, ["--set-json", 'devicePlugin.kubeletPluginDir="/var/lib/kubelet\\n--x"'], "/devicePlugin/kubeletPluginDir"),
    (OPERATOR_CHART, ["--set", "devicePlugin.dir=/dev"], "'dir' not allowed"),
    (CLUSTER_CHART, ["--set", "unknown=1"], "'unknown' not allowed"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "cpu", "replicas": "two"}]'], "/nodeSets/0/replicas"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "H100"}]'], "/nodeSets/0/name"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "' + "a" * 41 + '"}]'], "/nodeSets/0/name"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"replicas": 1}]'], "missing property 'name'"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "cpu", "clusterName": "other"}]'], "'clusterName' not allowed"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "cpu", "resources": {"cpu": "4.5"}}]'], "/nodeSets/0/resources/cpu"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "cpu", "replicas": 2000}]'], "/nodeSets/0/replicas"),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "a"}, {"name": "a"}]'], 'nodeSets[1].name: "a" is used twice'),
    (CLUSTER_CHART, ["--set-json", 'nodeSets=[{"name": "research-login"}]'], 'nodeSets[0].name: "research-login"'),
    (CLUSTER_CHART, ["--set", "cluster.slurm.imag=x"], "'imag' not allowed"),
    (CLUSTER_CHART, ["--set", "cluster.scheduling.preemption=sometimes"], "/cluster/scheduling/preemption"),
    (CLUSTER_CHART, ["--set", "cluster.login.replicas=-1"], "/cluster/login/replicas"),
    (CLUSTER_CHART, ["--set", "cluster.controller.persistence.size=big"], "/cluster/controller/persistence/size"),
    (CLUSTER_CHART, ["--set", "cluster.identity.mode=nis"], "/cluster/identity/mode"),
    (CLUSTER_CHART, ["--set-json", 'cluster.identity.ldap={"uris": ["http://x"]}'], "/cluster/identity/ldap/uris/0"),
    (CLUSTER_CHART, ["--set-json", 'cluster.identity.ldap={"searchBase": "dc=x\\nenumerate = true"}'], "/cluster/identity/ldap/searchBase"),
    (CLUSTER_CHART, ["--set", "clusterName=Research"], "/clusterName"),
    (CLUSTER_CHART, ["--set", "clusterName=" + "a" * 41], "/clusterName"),
]


@pytest.mark.parametrize(("chart", "args", "named"), REFUSED, ids=[" ".join(a) for _, a, _ in REFUSED])
def test_bad_values_are_refused_naming_the_value(helm, chart, args, named):
    result = helm("template", "research", chart, *args, check=False)
    assert result.returncode != 0, f"accepted: {args}"
    assert named in result.stderr, result.stderr


def test_release_name_too_long_for_a_cluster_name(helm):
    release = "a" * 41
    result = helm("template", release, CLUSTER_CHART, check=False)
    assert result.returncode != 0
    assert f'the cluster name "{release}" is longer than 40 characters' in result.stderr
    # clusterName makes such a release possible
    assert helm.template(release, CLUSTER_CHART, "--set", "clusterName=research")
