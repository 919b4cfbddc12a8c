"""The operator against a real kube-apiserver + kube-controller-manager, running with its own RBAC.

There is no kubelet in this tier: pods stay Pending and slurmctld never answers,
which is what the operator must handle gracefully (Ready=False, SlurmNotAnswering).
"""

import base64
import json
import time

import pytest
import yaml

from kubeslurm.api import load_files
from kubeslurm.render.config.files import render_config_files
from kubeslurm.render.slurm_pod import table_digest

from testbed.waiting import wait_for

from .operator_process import NEW_CLUSTER_SECONDS, OPERATOR_NAMESPACE, OPERATOR_USER, RBAC, REPO, OperatorProcess, eventually

pytestmark = pytest.mark.k8s
EXAMPLE = REPO / "examples" / "research.yaml"


def documents_in(namespace: str) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return docs


def as_yaml(docs) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


@pytest.fixture(scope="module")
def crds_installed(control_plane):
    control_plane.apply_crds(REPO / "crds")
    return control_plane


@pytest.fixture(scope="module")
def operator(crds_installed, tmp_path_factory):
    cp = crds_installed
    cp.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    cp.kubectl("apply", "-f", str(RBAC))
    workdir = tmp_path_factory.mktemp("operator")
    kubeconfig = cp.write_service_account_kubeconfig(OPERATOR_NAMESPACE, "kubeslurm-operator", workdir / "sa.kubeconfig")
    process = OperatorProcess(kubeconfig, workdir / "operator.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print("---- operator log ----\n" + process.log_tail(200))


def get(cp, kind, name, namespace):
    result = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def condition(obj, kind):
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return c
    return None


def apply_example(cp, namespace, docs=None):
    cp.kubectl("apply", "-f", "-", input=as_yaml(docs or documents_in(namespace)))


def wait_for_objects(cp, namespace):
    def all_there():
        names = ["research-controller", "research-accounting", "research-mariadb", "research-login", "h100", "cpu"]
        return all(get(cp, "statefulset", n, namespace) for n in names)

    eventually(all_there, timeout=90, what="the StatefulSets of research")


def test_operator_deployment_manifest_is_accepted(operator, control_plane):
    result = control_plane.kubectl("apply", "--dry-run=server", "-f", str(REPO / "deploy" / "operator.yaml"))
    assert "deployment.apps/kubeslurm-operator created (server dry run)" in result.stdout


def test_crds_install_and_print_columns(crds_installed):
    out = crds_installed.kubectl("get", "crd", "slurmclusters.kubeslurm.io", "-o", "json").stdout
    crd = json.loads(out)
    assert crd["status"]["acceptedNames"]["kind"] == "SlurmCluster"
    assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])


CLUSTER, GPU, CPU = documents_in("bad")
LDAP_DIRECTORY = {"uris": ["ldap://ldap.example.org"], "searchBase": "dc=example,dc=org", "caCertificate": {"configMap": {"name": "ca"}}}

# spec.bridge (issue 18): inference in namespace `inference`, charged to nlp as bob, on partition gpu
BRIDGE = {"enabled": True, "namespaces": [{"namespace": "inference", "account": "nlp", "user": "bob", "partition": "gpu"}]}

BAD_MANIFESTS = [
    ("preemption enum", CLUSTER, ["spec", "scheduling", "preemption"], "sometimes", "spec.scheduling.preemption"),
    ("decay half-life syntax", CLUSTER, ["spec", "scheduling", "fairShare", "decayHalfLife"], "a week", "spec.scheduling.fairShare.decayHalfLife"),
    ("max time syntax", CLUSTER, ["spec", "partitions", 0, "maxTime"], "tomorrow", "spec.partitions[0].maxTime"),
    ("two default partitions", CLUSTER, ["spec", "partitions", 1, "default"], True, "only one partition may be default"),
    ("both databases", CLUSTER, ["spec", "accounting", "database", "external"], {"host": "db", "passwordSecretRef": {"name": "x"}}, "exactly one of database.internal or database.external"),
    ("accounts without accounting", CLUSTER, ["spec", "accounting", "enabled"], False, "accounts need accounting.enabled"),
    ("shares below one", CLUSTER, ["spec", "accounts", 0, "shares"], 0, "spec.accounts[0].shares"),
    ("unknown field", CLUSTER, ["spec", "login", "replica"], 2, 'unknown field "spec.login.replica"'),
    ("cluster name too long", CLUSTER, ["metadata", "name"], "r" * 41, "at most 40 characters"),
    ("replicas above maxReplicas", GPU, ["spec", "replicas"], 100, "replicas must not exceed maxReplicas"),
    ("negative gpu count", GPU, ["spec", "gpus", "count"], -1, "spec.gpus.count"),
    ("fractional cpu", GPU, ["spec", "resources", "cpu"], "1.5", "spec.resources.cpu"),
    ("feature syntax", GPU, ["spec", "features"], ["has space"], "spec.features[0]"),
    ("nodeset name taken by the cluster", GPU, ["metadata", "name"], "research-login", "must not be <clusterName>-controller"),
    ("update strategy enum", GPU, ["spec", "updateStrategy", "type"], "Sometimes", "spec.updateStrategy.type"),
    # issue 11: no spec string becomes a config line or a shell command, podTemplate stays in bounds
    ("topology label injection", CLUSTER, ["spec", "topology"], {"plugin": "tree", "nodeLabels": ["zone\nSwitchName=evil"]},
     "spec.topology.nodeLabels[0]"),
    ("negative block size", CLUSTER, ["spec", "topology"], {"plugin": "block", "nodeLabels": ["b"], "blockSizes": [-4]},
     "spec.topology.blockSizes[0]"),
    ("external host injection", CLUSTER, ["spec", "accounting", "database"],
     {"external": {"host": "db$(touch /tmp/pwned)", "passwordSecretRef": {"name": "x"}}}, "spec.accounting.database.external.host"),
    ("external user newline", CLUSTER, ["spec", "accounting", "database"],
     {"external": {"host": "db", "user": "slurm\nStorageHost=evil", "passwordSecretRef": {"name": "x"}}},
     "spec.accounting.database.external.user"),
    ("slurm.conf value with a second key", CLUSTER, ["spec", "slurmConf"], {"MaxJobCount": "1 NodeName=evil"}, "spec.slurmConf.MaxJobCount"),
    ("slurm.conf value comment", CLUSTER, ["spec", "slurmConf"], {"MaxJobCount": "1#"}, "spec.slurmConf.MaxJobCount"),
    ("slurm.conf key", CLUSTER, ["spec", "slurmConf"], {"Max\nNodeName": "1"}, "spec.slurmConf"),
    ("image injection", CLUSTER, ["spec", "slurm", "image"], "slurm:24.11 --privileged", "spec.slurm.image"),
    ("storage class", CLUSTER, ["spec", "controller", "persistence", "storageClassName"], "Fast Disk", "spec.controller.persistence.storageClassName"),
    ("partition named default", CLUSTER, ["spec", "partitions", 1, "name"], "default", "reserved"),
    ("account named root", CLUSTER, ["spec", "accounts", 0, "name"], "root", "reserved"),
    ("nodeset named like the slurmctld service", GPU, ["metadata", "name"], "research-slurmctld-0", "must not be <clusterName>-controller"),
    ("nodeset whose pods are named like the slurmctld services", GPU, ["metadata", "name"], "research-slurmctld", "must not be <clusterName>-controller"),
    ("podTemplate privileged", GPU, ["spec", "podTemplate"],
     {"spec": {"containers": [{"name": "slurmd", "securityContext": {"privileged": True}}]}},
     'unknown field "spec.podTemplate.spec.containers[0].securityContext"'),
    ("podTemplate hostPID", GPU, ["spec", "podTemplate"], {"spec": {"hostPID": True}}, 'unknown field "spec.podTemplate.spec.hostPID"'),
    ("podTemplate sidecar", GPU, ["spec", "podTemplate"], {"spec": {"containers": [{"name": "steal"}]}},
     "spec.podTemplate.spec.containers[0].name"),
    ("podTemplate auth key volume", GPU, ["spec", "podTemplate"],
     {"spec": {"volumes": [{"name": "k", "secret": {"secretName": "research-auth-key"}}]}}, "a kubeslurm cluster's keys and passwords"),
    ("podTemplate mount over the key", GPU, ["spec", "podTemplate"],
     {"spec": {"volumes": [{"name": "x", "emptyDir": {}}], "containers": [{"name": "slurmd", "volumeMounts": [{"name": "x", "mountPath": "/etc/slurm"}]}]}},
     "spec.podTemplate.spec.containers[0].volumeMounts[0].mountPath"),
    ("podTemplate hostPath", GPU, ["spec", "podTemplate"], {"spec": {"volumes": [{"name": "r", "hostPath": {"path": "/"}}]}},
     'unknown field "spec.podTemplate.spec.volumes[0].hostPath"'),
    ("podTemplate malformed", GPU, ["spec", "podTemplate"], {"metadata": "oops"}, "spec.podTemplate.metadata"),
    # issue 18: spec.bridge, refused by the CRD's patterns and rules
    ("bridge account not in spec.accounts", CLUSTER, ["spec", "bridge"],
     {**BRIDGE, "namespaces": [{**BRIDGE["namespaces"][0], "account": "serving"}]}, "must be one of spec.accounts"),
    ("bridge partition not in spec.partitions", CLUSTER, ["spec", "bridge"],
     {**BRIDGE, "namespaces": [{**BRIDGE["namespaces"][0], "partition": "fast"}]}, "must be one of spec.partitions"),
    ("bridge on without namespaces", CLUSTER, ["spec", "bridge"], {"enabled": True}, "needs at least one entry in bridge.namespaces"),
    ("bridge namespace syntax", CLUSTER, ["spec", "bridge"],
     {**BRIDGE, "namespaces": [{**BRIDGE["namespaces"][0], "namespace": "Inference"}]}, "spec.bridge.namespaces[0].namespace"),
    ("bridge user injection", CLUSTER, ["spec", "bridge"],
     {**BRIDGE, "namespaces": [{**BRIDGE["namespaces"][0], "user": "bob --uid=root"}]}, "spec.bridge.namespaces[0].user"),
    ("bridge namespace twice", CLUSTER, ["spec", "bridge"],
     {**BRIDGE, "namespaces": [BRIDGE["namespaces"][0], {**BRIDGE["namespaces"][0], "account": "vision", "user": "alice"}]},
     "Duplicate value"),
    # issue 12: shared storage paths and sources, refused by the CRD's rules
    ("storage home under /etc", CLUSTER, ["spec", "storage"], {"home": {"mountPath": "/etc/homes", "nfs": {"server": "a", "path": "/x"}}},
     "the Slurm image owns those"),
    ("storage volume above a spool", CLUSTER, ["spec", "storage"],
     {"volumes": [{"name": "v", "mountPath": "/var", "nfs": {"server": "a", "path": "/x"}}]}, "the Slurm image owns those"),
    ("storage volume inside the home", CLUSTER, ["spec", "storage"],
     {"volumes": [{"name": "v", "mountPath": "/home/shared", "nfs": {"server": "a", "path": "/x"}}]}, "must not overlap the home path"),
    ("storage volumes overlapping", CLUSTER, ["spec", "storage"],
     {"volumes": [{"name": "a", "mountPath": "/data", "nfs": {"server": "a", "path": "/x"}},
                  {"name": "b", "mountPath": "/data/b", "nfs": {"server": "a", "path": "/y"}}]}, "must not overlap each other"),
    ("storage two sources", CLUSTER, ["spec", "storage"],
     {"home": {"nfs": {"server": "a", "path": "/x"}, "existingClaim": {"name": "homes"}}}, "set exactly one of existingClaim, newClaim, nfs"),
    ("storage nfs path injection", CLUSTER, ["spec", "storage"], {"home": {"nfs": {"server": "a", "path": "/x;reboot"}}},
     "spec.storage.home.nfs.path"),
    ("podTemplate volume named like a shared one", GPU, ["spec", "podTemplate"],
     {"spec": {"volumes": [{"name": "shared-data", "emptyDir": {}}]}}, "spec.storage.volumes"),
    # issue 13: spec.identity, refused by the CRD's patterns and rules
    ("ldap mode without its settings", CLUSTER, ["spec", "identity"], {"mode": "ldap"}, "identity.ldap is required with mode: ldap"),
    ("ldap settings in local mode", CLUSTER, ["spec", "identity"], {"mode": "local", "ldap": LDAP_DIRECTORY},
     "not allowed with mode: local"),
    ("ldap uri schemes mixed", CLUSTER, ["spec", "identity"],
     {"mode": "ldap", "ldap": {**LDAP_DIRECTORY, "uris": ["ldap://a.example.org", "ldaps://b.example.org"]}}, "use one scheme"),
    ("ldap bind DN without a password", CLUSTER, ["spec", "identity"],
     {"mode": "ldap", "ldap": {**LDAP_DIRECTORY, "bindDN": "cn=sssd,dc=example,dc=org"}}, "set bindDN and bindPasswordSecretRef together"),
    ("ldap CA from two places", CLUSTER, ["spec", "identity"],
     {"mode": "ldap", "ldap": {**LDAP_DIRECTORY, "caCertificate": {"secret": {"name": "a"}, "configMap": {"name": "b"}}}},
     "set exactly one of secret or configMap"),
    ("ldap groups and filter", CLUSTER, ["spec", "identity"],
     {"mode": "ldap", "ldap": {**LDAP_DIRECTORY, "loginGroups": ["hpc"], "loginFilter": "(uid=*)"}}, "not both"),
    ("ldap search base line injection", CLUSTER, ["spec", "identity"],
     {"mode": "ldap", "ldap": {**LDAP_DIRECTORY, "searchBase": "dc=org\nldap_tls_reqcert = never"}}, "spec.identity.ldap.searchBase"),
    # the bridged pods' Slurm feature is the operator's to give (NodeSet spec.bridged)
    ("bridged feature in spec.features", GPU, ["spec", "features"], ["nvlink", "kubeslurm_bridged"],
     "features must not name kubeslurm_bridged"),
    ("podTemplate GPU resource", GPU, ["spec", "podTemplate"],
     {"spec": {"containers": [{"name": "slurmd", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}, "GPUs come from spec.gpus"),
]


def changed(doc, path, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for part in path[:-1]:
        node = node[part] if isinstance(part, int) else node.setdefault(part, {})
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize("doc,path,value,expected", [b[1:] for b in BAD_MANIFESTS], ids=[b[0] for b in BAD_MANIFESTS])
def test_bad_manifests_are_refused_by_kubectl_apply(crds_installed, namespace, doc, path, value, expected):
    bad = changed(doc, path, value)
    bad["metadata"]["namespace"] = namespace
    result = crds_installed.kubectl("apply", "-f", "-", input=as_yaml([bad]), check=False)
    assert result.returncode != 0, f"accepted: {bad}"
    assert expected in result.stderr, result.stderr


def test_a_bridged_cluster_is_accepted_by_kubectl_apply(crds_installed, namespace):
    bridged = changed(CLUSTER, ["spec", "bridge"], BRIDGE)
    bridged["metadata"]["namespace"] = namespace
    result = crds_installed.kubectl("apply", "--dry-run=server", "-f", "-", input=as_yaml([bridged]))
    assert "slurmcluster.kubeslurm.io/research created (server dry run)" in result.stdout, result.stdout


def test_contract_manifest_creates_the_expected_objects(operator, control_plane, namespace):
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)

    config = eventually(lambda: get(cp, "configmap", "research-slurm-config", namespace), what="the ConfigMap")
    manifests = load_files([EXAMPLE])
    cluster = manifests.clusters[0]
    offline = render_config_files(cluster, manifests.node_sets_of(cluster))
    assert config["data"]["slurm.conf"] == offline["slurm.conf"].replace("hpc/research", f"{namespace}/research")
    assert set(config["data"]) == set(offline)

    key = get(cp, "secret", "research-auth-key", namespace)
    assert len(base64.b64decode(key["data"]["slurm.key"])) == 1024
    dbd = get(cp, "secret", "research-slurmdbd-config", namespace)
    password = base64.b64decode(get(cp, "secret", "research-mariadb-password", namespace)["data"]["password"]).decode()
    assert f"StoragePass={password}" in base64.b64decode(next(iter(dbd["data"].values()))).decode()
    assert password not in json.dumps(config)

    h100 = get(cp, "statefulset", "h100", namespace)
    assert h100["spec"]["replicas"] == 2
    container = next(c for c in h100["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert any("Gres=gpu:h100:8" in arg for arg in container.get("args", []) + container.get("command", []))
    assert get(cp, "statefulset", "cpu", namespace)["spec"]["replicas"] == 1

    uid = get(cp, "slurmcluster", "research", namespace)["metadata"]["uid"]
    for kind, name in [("configmap", "research-slurm-config"), ("statefulset", "research-controller"), ("service", "research-controller"), ("secret", "research-auth-key")]:
        owners = get(cp, kind, name, namespace)["metadata"]["ownerReferences"]
        assert owners[0]["uid"] == uid and owners[0]["controller"] is True
    node_set = eventually(lambda: get(cp, "nodeset", "h100", namespace)["metadata"].get("ownerReferences"), what="NodeSet owner")
    assert node_set[0]["uid"] == uid

    # No kubelet here: slurmctld never answers, and the status says so instead of pretending.
    cluster_obj = eventually(lambda: condition(get(cp, "slurmcluster", "research", namespace), "Ready") and get(cp, "slurmcluster", "research", namespace), what="status")
    assert condition(cluster_obj, "Ready")["status"] == "False"
    assert condition(cluster_obj, "Ready")["reason"] == "SlurmNotAnswering"
    assert condition(cluster_obj, "Degraded")["status"] == "False"
    ns_obj = eventually(lambda: get(cp, "nodeset", "h100", namespace).get("status", {}).get("selector") and get(cp, "nodeset", "h100", namespace))
    assert "kubeslurm.io/nodeset=h100" in ns_obj["status"]["selector"]
    table = cp.kubectl("get", "slurmclusters,nodesets", "-n", namespace).stdout
    assert "READY" in table and "GPUS" in table and "h100" in table


def test_spec_changes_rerender_and_scale_subresource_scales(operator, control_plane, namespace):
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)
    cp.kubectl("patch", "slurmcluster", "research", "-n", namespace, "--type=json", "-p",
               json.dumps([{"op": "add", "path": "/spec/partitions/-", "value": {"name": "all", "nodeSets": ["h100", "cpu"]}}]))
    eventually(lambda: "PartitionName=all Nodes=h100,cpu" in get(cp, "configmap", "research-slurm-config", namespace)["data"]["slurm.conf"],
               what="the new partition in slurm.conf")
    cp.kubectl("scale", "nodeset", "h100", "-n", namespace, "--replicas=4")
    eventually(lambda: get(cp, "statefulset", "h100", namespace)["spec"]["replicas"] == 4, what="scale up to 4")
    # No pod runs here, so no job can: scale-down goes straight through.
    cp.kubectl("scale", "nodeset", "h100", "-n", namespace, "--replicas=1")
    eventually(lambda: get(cp, "statefulset", "h100", namespace)["spec"]["replicas"] == 1, what="scale down to 1")
    ns_obj = eventually(lambda: get(cp, "nodeset", "h100", namespace)["status"].get("replicas") == 1 and get(cp, "nodeset", "h100", namespace), what="status.replicas")
    assert ns_obj["status"]["replicas"] == 1


def test_drift_is_corrected(operator, control_plane, namespace):
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)
    cp.kubectl("scale", "statefulset", "h100", "-n", namespace, "--replicas=5")
    eventually(lambda: get(cp, "statefulset", "h100", namespace)["spec"]["replicas"] == 2, what="replicas restored")
    cp.kubectl("delete", "configmap", "research-slurm-config", "-n", namespace)
    eventually(lambda: get(cp, "configmap", "research-slurm-config", namespace), what="ConfigMap recreated")
    cp.kubectl("delete", "service", "research-controller", "-n", namespace)
    eventually(lambda: get(cp, "service", "research-controller", namespace), what="Service recreated")


def test_moving_the_database_outside_and_back_keeps_its_claim(operator, control_plane, namespace):
    """An edit that prunes the MariaDB StatefulSet (an external database; accounting off works
    the same way) keeps the claim with the accounting data; moving back finds the same claim."""
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)
    claim = eventually(lambda: get(cp, "pvc", "data-research-mariadb-0", namespace), what="the database claim")
    assert [ref["kind"] for ref in claim["metadata"]["ownerReferences"]] == ["SlurmCluster"]
    cp.kubectl("create", "secret", "generic", "site-db", "-n", namespace, "--from-literal=password=site-db-password")
    outside = {"external": {"host": "db.example.org", "passwordSecretRef": {"name": "site-db"}}}
    cp.kubectl("patch", "slurmcluster", "research", "-n", namespace, "--type=json", "-p",
               json.dumps([{"op": "replace", "path": "/spec/accounting/database", "value": outside}]))
    eventually(lambda: get(cp, "statefulset", "research-mariadb", namespace) is None, what="the MariaDB StatefulSet pruned")
    time.sleep(5)  # the garbage collector would have deleted a claim the StatefulSet owned by now
    kept = get(cp, "pvc", "data-research-mariadb-0", namespace)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"]
    assert kept["metadata"].get("deletionTimestamp") is None
    inside = {"internal": {"size": "2Gi"}}
    cp.kubectl("patch", "slurmcluster", "research", "-n", namespace, "--type=json", "-p",
               json.dumps([{"op": "replace", "path": "/spec/accounting/database", "value": inside}]))
    eventually(lambda: get(cp, "statefulset", "research-mariadb", namespace), what="the MariaDB StatefulSet back")
    assert get(cp, "pvc", "data-research-mariadb-0", namespace)["metadata"]["uid"] == claim["metadata"]["uid"]


def test_deleting_the_cluster_removes_everything(operator, control_plane, namespace):
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)
    eventually(lambda: get(cp, "nodeset", "cpu", namespace)["metadata"].get("ownerReferences"), what="NodeSet owner")
    cp.kubectl("delete", "slurmcluster", "research", "-n", namespace, "--wait=false")

    def leftovers():
        kinds = "statefulsets,services,configmaps,secrets,poddisruptionbudgets,networkpolicies,persistentvolumeclaims,pods,nodesets"
        names = cp.kubectl("get", kinds, "-n", namespace, "-o", "name").stdout.split()
        return [n for n in names if "kube-root-ca" not in n]

    wait_for(lambda: not leftovers(), 120, "every object of the deleted cluster gone", interval=1,
             details=lambda: f"left: {leftovers()}")
    assert leftovers() == []


def test_a_reconcile_with_nothing_changed_writes_nothing_even_across_a_restart(operator, control_plane, namespace):
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)

    def writes_here(mark):
        # Other tests' namespaces may still be winding down; this test judges its own objects.
        return [
            (w["verb"], w["requestURI"])
            for w in cp.audit_writes(since=mark, user=OPERATOR_USER)
            if f"/namespaces/{namespace}/" in w["requestURI"] or "/namespaces/" not in w["requestURI"]
        ]

    def settled():
        mark = cp.audit_mark()
        time.sleep(3 * operator.resync_seconds + 1)
        return not writes_here(mark) or print("still writing:", writes_here(mark))

    eventually(settled, timeout=90, interval=0, what="a quiet period")
    mark = cp.audit_mark()
    before = operator.scrape()
    time.sleep(4 * operator.resync_seconds)
    assert writes_here(mark) == []
    # the operator's own count agrees: reconciles ran, and not one API write among them
    after = operator.scrape()
    ours = {"namespace": namespace, "cluster": "research"}
    count = lambda m: metric(m, "kubeslurm_reconcile_duration_seconds_count", **ours)
    assert count(after) >= count(before) + 2
    assert metric(after, "kubeslurm_api_writes_total", namespace=namespace) == metric(
        before, "kubeslurm_api_writes_total", namespace=namespace)

    operator.stop()
    mark = cp.audit_mark()
    operator.start()
    eventually(lambda: "reconcile" in operator.log_tail(400).lower() or operator.alive(), what="operator restart")
    time.sleep(6 * operator.resync_seconds + 5)
    assert operator.alive(), operator.log_tail()
    assert writes_here(mark) == []


def metric(scraped: dict, sample: str, **labels) -> float:
    """The sum of the samples named `sample` (e.g. kubeslurm_api_writes_total) whose labels include `labels`."""
    family = sample.removesuffix("_total").removesuffix("_count").removesuffix("_sum").removesuffix("_bucket")
    return sum(s.value for s in scraped.get(family, []) if s.name == sample and labels.items() <= s.labels.items())


STEPS = ["LoadSpec", "CheckStorage", "RecordUnixIds", "EnsureSecrets", "ObserveKubernetes", "ObserveSlurm",
         "PlanScaling", "Render", "Apply", "Prune", "SyncSlurm"]


def test_metrics_show_the_cluster_s_reconciles_api_writes_and_slurm_down(operator, control_plane, namespace):
    """Scraped over HTTP from the operator process and parsed by prometheus_client's parser."""
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)
    ours = {"namespace": namespace, "cluster": "research"}
    scraped = eventually(lambda: (m := operator.scrape()) and metric(
        m, "kubeslurm_reconcile_duration_seconds_count", outcome="succeeded", **ours) >= 2 and m,
        what="two successful reconciles in the metrics")
    for step in STEPS:
        assert metric(scraped, "kubeslurm_reconcile_step_duration_seconds_count", step=step, outcome="succeeded", **ours) >= 2, step
    # a failed step (Render, while a NodeSet the partitions name is not there yet) counts under its own name
    assert {s.labels["outcome"] for s in scraped["kubeslurm_reconcile_duration_seconds"]} <= {"succeeded", "failed"}
    assert metric(scraped, "kubeslurm_reconcile_duration_seconds_sum", **ours) > 0
    # the six StatefulSets of research.yaml applied, its Secrets created, its status patched
    writes = lambda **labels: metric(scraped, "kubeslurm_api_writes_total", namespace=namespace, **labels)
    assert writes(kind="StatefulSet", verb="apply", code="2xx") >= 6
    assert writes(kind="Secret", verb="create", code="2xx") >= 2
    assert writes(kind="SlurmCluster", verb="patch-status", code="2xx") >= 1
    assert metric(scraped, "kubeslurm_api_reads_total", namespace=namespace, kind="StatefulSet", verb="list") >= 2
    # no kubelet in this tier: slurmctld never runs, and the metrics say so
    assert metric(scraped, "kubeslurm_slurmctld_up", **ours) == 0
    assert [s.value for s in scraped["kubeslurm_slurmdbd_up"] if s.labels.items() >= ours.items()] == [0]
    assert "kubeslurm_slurm_nodes" not in scraped or not metric(scraped, "kubeslurm_slurm_nodes", **ours)
    assert metric(scraped, "kubeslurm_clusters") >= 1
    assert "kubeslurm_pending_wakeups" in scraped

    cp.kubectl("delete", "slurmcluster", "research", "-n", namespace, "--wait=false")

    def forgotten():
        return not [
            (family, s.labels) for family, samples in operator.scrape().items() for s in samples
            if s.labels.get("namespace") == namespace and s.labels.get("cluster") == "research"
        ]

    eventually(forgotten, timeout=60, what="the deleted cluster's series gone from /metrics")


def test_pods_that_cannot_schedule_are_named_with_the_scheduler_s_reason_in_ready(operator, control_plane, namespace):
    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)

    def ready(kind, name):
        return condition(get(cp, kind, name, namespace), "Ready") or {}

    # No scheduler in this tier: the pods exist, Pending, and nothing has looked at them yet.
    eventually(lambda: "h100-1" in ready("nodeset", "h100").get("message", ""), what="the pods in h100's Ready message")
    assert ready("nodeset", "h100") | {"lastTransitionTime": None} == ready("nodeset", "h100") | {
        "status": "False", "reason": "NodesNotReady", "lastTransitionTime": None,
        "message": "0/2 slurmd pods ready: h100-0, h100-1 Pending: not scheduled yet"}
    assert ready("slurmcluster", "research")["message"] == (
        "slurmctld does not answer: research-controller-0 Pending: not scheduled yet")
    # What kube-scheduler writes on a pod no node fits; the NodeSet says it within a resync.
    unschedulable = "0/3 nodes are available: 3 Insufficient cpu."
    for pod in ("h100-0", "h100-1"):
        cp.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": unschedulable}]}}))
    eventually(lambda: ready("nodeset", "h100")["message"] == f"0/2 slurmd pods ready: h100-0, h100-1 Pending: {unschedulable}",
               timeout=30, what="the scheduler's reason in h100's Ready message")
    described = cp.kubectl("describe", "nodeset", "h100", "-n", namespace).stdout
    assert "Insufficient cpu" in described


def test_node_set_without_cluster_gets_a_clear_condition_and_nothing_is_created(operator, control_plane, namespace):
    cp = control_plane
    _, gpu, _ = documents_in(namespace)
    gpu["spec"]["clusterName"] = "nowhere"
    cp.kubectl("apply", "-f", "-", input=as_yaml([gpu]))
    ns_obj = eventually(lambda: condition(get(cp, "nodeset", "h100", namespace), "Degraded") and get(cp, "nodeset", "h100", namespace), what="Degraded")
    degraded = condition(ns_obj, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ClusterNotFound"
    assert "spec.clusterName" in degraded["message"] and "nowhere" in degraded["message"]
    assert get(cp, "statefulset", "h100", namespace) is None


def test_partition_naming_a_missing_node_set_waits_while_new_then_degrades_and_creates_nothing(operator, control_plane, namespace):
    """The cluster's first reconciles may come before its NodeSets are created (one `kubectl
    apply -f` creates them one after the other): while the cluster is new that is waited for
    (Ready False, WaitingForNodeSets, no Warning); a NodeSet still missing later is InvalidSpec."""
    cp = control_plane
    cluster, gpu, _ = documents_in(namespace)  # no cpu NodeSet, yet partition cpu names it
    cp.kubectl("apply", "-f", "-", input=as_yaml([cluster, gpu]))
    created = time.monotonic()

    def waiting_for_cpu():
        # a reconcile before NodeSet h100 was created waited for both
        ready = condition(get(cp, "slurmcluster", "research", namespace), "Ready")
        return ready if ready["reason"] == "WaitingForNodeSets" and "NodeSet 'cpu', not created yet" in ready["message"] else None
    waiting = eventually(waiting_for_cpu, timeout=NEW_CLUSTER_SECONDS, what="Ready WaitingForNodeSets naming cpu")
    assert waiting["status"] == "False", waiting
    degraded = condition(get(cp, "slurmcluster", "research", namespace), "Degraded")
    assert not degraded or degraded["status"] != "True", degraded
    assert "InvalidSpec" not in cp.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert get(cp, "configmap", "research-slurm-config", namespace) is None

    def degraded_on_cpu():
        # A reconcile that ran before the operator's watch delivered NodeSet h100 rightly names
        # partitions[0] first; the level it settles on names only the NodeSet that is missing.
        found = condition(get(cp, "slurmcluster", "research", namespace), "Degraded")
        return found if found and "'cpu'" in found["message"] else None
    degraded = eventually(degraded_on_cpu, timeout=NEW_CLUSTER_SECONDS + 60, what="Degraded naming NodeSet cpu")
    assert time.monotonic() - created >= NEW_CLUSTER_SECONDS - 2  # the API server's clock starts it
    assert degraded["status"] == "True" and degraded["reason"] == "InvalidSpec"
    assert "spec.partitions[1].nodeSets" in degraded["message"] and "(NodeSets: h100)" in degraded["message"]
    assert get(cp, "statefulset", "research-controller", namespace) is None
    assert get(cp, "configmap", "research-slurm-config", namespace) is None
    events = cp.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "InvalidSpec" in events
    # fixing it lets the reconcile go through
    cp.kubectl("apply", "-f", "-", input=as_yaml([documents_in(namespace)[2]]))
    eventually(lambda: get(cp, "statefulset", "research-controller", namespace), what="objects after the fix")


def test_owned_slurm_conf_key_is_refused_with_what_to_change(operator, control_plane, namespace):
    cp = control_plane
    docs = documents_in(namespace)
    docs[0]["spec"]["slurmConf"] = {"SchedulerType": "sched/builtin"}
    apply_example(cp, namespace, docs)
    def degraded():
        # (Degraded False first while the first reconcile waited for the NodeSets: awaited_node_sets.py)
        found = condition(get(cp, "slurmcluster", "research", namespace), "Degraded")
        return found if found and found["status"] == "True" else None
    message = eventually(degraded, what="Degraded")["message"]
    assert "spec.slurmConf.SchedulerType" in message and "spec.scheduling.backfill" in message


def node_set_degraded(cp, namespace: str, name: str) -> dict:
    """The NodeSet's Degraded condition once it is True."""
    def degraded():
        found = condition(get(cp, "nodeset", name, namespace), "Degraded")
        return found and found["status"] == "True" and found
    return eventually(degraded, what=f"NodeSet {name} Degraded")


def test_a_node_set_named_like_an_older_cluster_s_object_is_refused_and_that_cluster_kept(operator, control_plane, namespace):
    """NodeSet `other-controller` of cluster research would own a StatefulSet (and pods) named
    like cluster other's controller: the newer object is InvalidSpec, the older cluster untouched."""
    cp = control_plane
    docs = documents_in(namespace)
    other = json.loads(json.dumps(next(d for d in docs if d["kind"] == "SlurmCluster")))
    other["metadata"]["name"] = "other"
    other["spec"].pop("partitions")  # a cluster without NodeSets of its own yet
    apply_example(cp, namespace, [other])
    before = eventually(lambda: get(cp, "statefulset", "other-controller", namespace), what="cluster other's controller")
    squatter = json.loads(json.dumps(next(d for d in docs if d["kind"] == "NodeSet" and d["metadata"]["name"] == "cpu")))
    squatter["metadata"]["name"] = "other-controller"
    apply_example(cp, namespace, [*docs, squatter])
    wait_for_objects(cp, namespace)

    degraded = node_set_degraded(cp, namespace, "other-controller")
    assert degraded["reason"] == "InvalidSpec", degraded
    assert "metadata.name" in degraded["message"] and "SlurmCluster" in degraded["message"], degraded
    after = get(cp, "statefulset", "other-controller", namespace)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert [(r["kind"], r["name"]) for r in after["metadata"]["ownerReferences"]] == [("SlurmCluster", "other")]
    assert condition(get(cp, "slurmcluster", "research", namespace), "Degraded")["reason"] == "NodeSetInvalid"


def test_a_bridged_node_set_of_a_cluster_without_the_bridge_is_refused_naming_spec_bridged(operator, control_plane, namespace):
    """spec.bridged asks for nodes dedicated to the cluster's bridge, which is off: the NodeSet is
    InvalidSpec with what to change, and renders nothing; the rest of the cluster goes on."""
    cp = control_plane
    docs = documents_in(namespace)
    # A NodeSet of no partition: a partition naming a NodeSet that renders nothing would stop the cluster.
    edge = json.loads(json.dumps(next(d for d in docs if d["kind"] == "NodeSet" and d["metadata"]["name"] == "cpu")))
    edge["metadata"]["name"] = "edge"
    edge["spec"]["bridged"] = True
    apply_example(cp, namespace, [*docs, edge])
    wait_for_objects(cp, namespace)

    degraded = node_set_degraded(cp, namespace, "edge")
    assert degraded["reason"] == "InvalidSpec", degraded
    assert "spec.bridged is true but SlurmCluster research has spec.bridge.enabled off" in degraded["message"], degraded
    assert get(cp, "statefulset", "edge", namespace) is None
    assert condition(get(cp, "slurmcluster", "research", namespace), "Degraded")["reason"] == "NodeSetInvalid"


def test_a_bridged_node_set_is_degraded_until_its_dedicated_nodes_can_hold_it(operator, control_plane, namespace):
    """A bridged slurmd pod requests only slurmd's overhead, so nothing in Kubernetes stops a
    NodeSet bigger than its dedicated nodes: the operator compares the NodeSet with the
    allocatable of every Node labelled kubeslurm.io/bridge=<cluster> and says what to change."""
    cp = control_plane
    docs = documents_in(namespace)
    cluster, h100, _cpu = docs
    cluster["spec"]["bridge"] = BRIDGE
    h100["spec"]["bridged"] = True  # research.yaml's h100: 8 CPUs, 32Gi, 8 nvidia.com/gpu a node
    node = f"bridge-node-{namespace}"

    def allocatable(cpu: str):
        amounts = {"cpu": cpu, "memory": "64Gi", "nvidia.com/gpu": "8", "pods": "110"}
        cp.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"capacity": amounts, "allocatable": amounts}}))

    try:
        apply_example(cp, namespace, docs)
        missing = node_set_degraded(cp, namespace, "h100")
        assert missing["reason"] == "NoBridgedNodes", missing
        assert "no Kubernetes node is labelled kubeslurm.io/bridge=research" in missing["message"], missing
        # still rendered (the report is written even by a reconcile that failed before applying it)
        eventually(lambda: get(cp, "statefulset", "h100", namespace), what="the degraded NodeSet's StatefulSet")

        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": node, "labels": {"kubeslurm.io/bridge": "research"}}}))
        allocatable("4")

        # A reconcile between the Node's creation and the patch reads no allocatable (cpu 0): also
        # too small, but not yet the report this waits for.
        short = f"node {node} has cpu 4 allocatable, spec.resources.cpu asks for 8"

        def too_small():
            found = condition(get(cp, "nodeset", "h100", namespace), "Degraded")
            return found if found and found["reason"] == "BridgedNodesTooSmall" and short in found["message"] else None
        eventually(too_small, timeout=60, what=f"h100 Degraded BridgedNodesTooSmall: {short}")

        allocatable("16")
        eventually(lambda: condition(get(cp, "nodeset", "h100", namespace), "Degraded")["status"] == "False",
                   timeout=60, what="h100 no longer Degraded once its node can hold it")
    finally:
        cp.kubectl("delete", "node", node, "--ignore-not-found")


def test_an_object_someone_else_made_under_our_name_is_not_taken_over(operator, control_plane, namespace):
    cp = control_plane
    planted = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "research-slurm-config", "namespace": namespace},
               "data": {"slurm.conf": "SlurmctldHost=attacker\n"}}
    cp.kubectl("apply", "-f", "-", input=as_yaml([planted]))
    apply_example(cp, namespace)

    def refused():  # (the first reconcile may still miss a NodeSet that kubectl had not created yet)
        degraded = condition(get(cp, "slurmcluster", "research", namespace), "Degraded")
        return degraded and degraded["reason"] == "ObjectNotOurs" and degraded
    degraded = eventually(refused, what="research Degraded with ObjectNotOurs")
    assert degraded["status"] == "True", degraded
    assert "ConfigMap" in degraded["message"] and "research-slurm-config" in degraded["message"], degraded
    assert get(cp, "configmap", "research-slurm-config", namespace)["data"] == planted["data"]
    # Nothing applied, not even what comes before the ConfigMap in the apply order: every object is
    # checked before the first apply.
    assert get(cp, "statefulset", "research-controller", namespace) is None
    assert get(cp, "persistentvolumeclaim", "research-controller-state", namespace) is None


def test_uids_are_recorded_in_status_and_kept_across_adds_and_removes(operator, control_plane, namespace):
    """status.unixIds: a user keeps its uid for good, a newcomer whose name's uid is taken gets the
    next free one, a removed user's uid goes to nobody; every Slurm pod template uses the table."""
    cp = control_plane
    docs = documents_in(namespace)
    docs[0]["spec"]["accounts"] = [{"name": "vision", "users": ["alice", "zoe"]}, {"name": "nlp", "users": ["bob"]}]
    apply_example(cp, namespace, docs)
    wait_for_objects(cp, namespace)

    def unix_ids():
        return (get(cp, "slurmcluster", "research", namespace).get("status") or {}).get("unixIds") or {}

    def uids_in_pods(statefulset):
        """The users table of the cluster's ConfigMap, once the StatefulSet's pods read that very table
        (their template names its digest)."""
        table = get(cp, "configmap", "research-unix-users", namespace)["data"]["users"]
        script = get(cp, "statefulset", statefulset, namespace)["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]
        if f"# the users of table {table_digest(table)} " not in script:
            return None
        return {name: int(uid) for name, uid in (line.split() for line in table.splitlines())}

    first = eventually(lambda: len(unix_ids()) == 3 and unix_ids(), what="status.unixIds of alice, bob, zoe")
    for statefulset in ("h100", "research-controller", "research-login"):
        eventually(lambda: uids_in_pods(statefulset) == first, what=f"{statefulset} pods with the recorded uids")

    # a3219's name hashes to zoe's uid; bob leaves the spec
    accounts = [{"name": "vision", "users": ["alice", "zoe", "a3219"]}, {"name": "nlp", "users": []}]
    cp.kubectl("patch", "slurmcluster", "research", "-n", namespace, "--type=merge", "-p",
               json.dumps({"spec": {"accounts": accounts}}))
    second = eventually(lambda: "a3219" in unix_ids() and unix_ids(), what="a3219 recorded")
    assert second == {**first, "a3219": first["zoe"] + 1}, second  # zoe and bob keep theirs
    without_bob = {name: uid for name, uid in second.items() if name != "bob"}
    eventually(lambda: uids_in_pods("h100") == without_bob, what="h100 pods with a3219 and without bob")

    # A hand-edited table giving two users one uid stops the reconcile, naming the field; nothing is re-rendered.
    def edited_and_degraded():
        cluster = get(cp, "slurmcluster", "research", namespace)
        if cluster["status"]["unixIds"].get("a3219") != first["zoe"]:
            # (again when a reconcile that was running wrote its own table over the edit: seen in
            # CI with the tiers side by side)
            cp.kubectl("patch", "slurmcluster", "research", "-n", namespace, "--subresource=status", "--type=merge",
                       "-p", json.dumps({"status": {"unixIds": {"a3219": first["zoe"]}}}))
            return None
        degraded = condition(cluster, "Degraded")
        return degraded and degraded["status"] == "True" and degraded

    degraded = eventually(edited_and_degraded, what="Degraded after the edit")
    assert degraded["reason"] == "RecordUnixIdsFailed", degraded
    assert "status.unixIds: 'a3219' and 'zoe' both have uid" in degraded["message"], degraded
    assert uids_in_pods("h100") == without_bob


def degraded_with(cp, namespace, reason):
    def check():
        degraded = condition(get(cp, "slurmcluster", "research", namespace), "Degraded")
        return degraded and degraded["reason"] == reason and degraded
    return eventually(check, what=f"research Degraded with {reason}")


def secret_manifest(namespace, name, data: dict[str, bytes]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


def test_a_planted_auth_key_is_neither_used_nor_overwritten(operator, control_plane, namespace):
    """Issue 11 item 5: a key someone else made under the cluster's name would let them forge any
    Slurm user. The cluster is Degraded naming it, nothing is created; deleting it lets the operator
    make its own."""
    cp = control_plane
    planted = secret_manifest(namespace, "research-auth-key", {"slurm.key": b"known-to-the-attacker" * 4})
    cp.kubectl("apply", "-f", "-", input=as_yaml([planted]))
    before = get(cp, "secret", "research-auth-key", namespace)
    apply_example(cp, namespace)
    degraded = degraded_with(cp, namespace, "UntrustedSecret")
    assert degraded["status"] == "True"
    assert f"Secret {namespace}/research-auth-key" in degraded["message"] and "Delete it" in degraded["message"], degraded
    after = get(cp, "secret", "research-auth-key", namespace)
    assert after["data"] == before["data"] and after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    # nothing half made: no password, no slurmdbd.conf, no pod anywhere
    assert get(cp, "secret", "research-mariadb-password", namespace) is None
    assert get(cp, "secret", "research-slurmdbd-config", namespace) is None
    assert get(cp, "statefulset", "research-controller", namespace) is None
    events = json.loads(cp.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    assert any(e["reason"] == "UntrustedSecret" and e["type"] == "Warning" and "research-auth-key" in e["message"]
               for e in events), [e["reason"] for e in events]

    cp.kubectl("delete", "secret", "research-auth-key", "-n", namespace)
    wait_for_objects(cp, namespace)
    key = get(cp, "secret", "research-auth-key", namespace)
    uid = get(cp, "slurmcluster", "research", namespace)["metadata"]["uid"]
    assert [(r["uid"], r["controller"]) for r in key["metadata"]["ownerReferences"]] == [(uid, True)]
    assert len(base64.b64decode(key["data"]["slurm.key"])) == 1024


def test_a_planted_database_password_is_refused(operator, control_plane, namespace):
    cp = control_plane
    planted = secret_manifest(namespace, "research-mariadb-password", {"password": b"chosen-by-the-attacker"})
    cp.kubectl("apply", "-f", "-", input=as_yaml([planted]))
    apply_example(cp, namespace)
    degraded = degraded_with(cp, namespace, "UntrustedSecret")
    assert f"Secret {namespace}/research-mariadb-password" in degraded["message"], degraded
    assert "chosen-by-the-attacker" not in json.dumps(get(cp, "slurmcluster", "research", namespace))
    assert get(cp, "secret", "research-auth-key", namespace) is None  # nothing created before the refusal
    assert get(cp, "secret", "research-slurmdbd-config", namespace) is None


def with_external_password(namespace, secret_name, key):
    docs = documents_in(namespace)
    docs[0]["spec"]["accounting"]["database"] = {
        "external": {"host": "db.example.org", "passwordSecretRef": {"name": secret_name, "key": key}}}
    return docs


def test_password_secret_ref_may_not_name_another_cluster_s_key(operator, control_plane, namespace):
    cp = control_plane
    theirs = secret_manifest(namespace, "other-auth-key", {"slurm.key": bytes(range(256)) * 4})
    cp.kubectl("apply", "-f", "-", input=as_yaml([theirs]))
    apply_example(cp, namespace, with_external_password(namespace, "other-auth-key", "slurm.key"))
    degraded = degraded_with(cp, namespace, "UntrustedSecret")
    assert "spec.accounting.database.external.passwordSecretRef" in degraded["message"], degraded
    assert f"Secret {namespace}/other-auth-key" in degraded["message"], degraded
    assert get(cp, "secret", "research-slurmdbd-config", namespace) is None
    assert get(cp, "secret", "research-auth-key", namespace) is None


def test_an_external_password_slurmdbd_conf_cannot_hold_is_refused_unquoted(operator, control_plane, namespace):
    cp = control_plane
    site = secret_manifest(namespace, "site-db", {"pw": b"pass StorageHost=evil.example.org"})
    cp.kubectl("apply", "-f", "-", input=as_yaml([site]))
    apply_example(cp, namespace, with_external_password(namespace, "site-db", "pw"))
    degraded = degraded_with(cp, namespace, "InvalidSecret")
    assert f"Secret {namespace}/site-db, key 'pw'" in degraded["message"] and "space" in degraded["message"], degraded
    assert "evil" not in degraded["message"]
    assert get(cp, "secret", "research-slurmdbd-config", namespace) is None


def test_no_password_in_the_database_pod_s_env_or_in_a_plain_hash(operator, control_plane, namespace):
    """Issue 11 item 6: MariaDB reads its password from a file; slurmdbd's config-hash is keyed."""
    import hashlib
    import hmac

    cp = control_plane
    apply_example(cp, namespace)
    wait_for_objects(cp, namespace)
    mariadb = get(cp, "statefulset", "research-mariadb", namespace)["spec"]["template"]["spec"]
    (container,) = mariadb["containers"]
    assert not [e for e in container["env"] if "valueFrom" in e or e["name"] == "MARIADB_PASSWORD"]
    assert "MARIADB_PASSWORD_FILE" in {e["name"] for e in container["env"]}
    assert any(v.get("secret", {}).get("secretName") == "research-mariadb-password" for v in mariadb["volumes"])

    conf = base64.b64decode(get(cp, "secret", "research-slurmdbd-config", namespace)["data"]["slurmdbd.conf"]).decode()
    canonical = json.dumps({"slurmdbd.conf": conf}, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    annotation = get(cp, "statefulset", "research-accounting", namespace)["spec"]["template"]["metadata"]["annotations"]["kubeslurm.io/config-hash"]
    assert annotation != hashlib.sha256(canonical).hexdigest()
    auth_key = base64.b64decode(get(cp, "secret", "research-auth-key", namespace)["data"]["slurm.key"])
    key = hmac.new(auth_key, b"kubeslurm.io/config-hash-key/v1", hashlib.sha256).digest()
    assert annotation == hmac.new(key, canonical, hashlib.sha256).hexdigest()


def pvc_manifest(namespace, name, *modes) -> dict:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": "1Gi"}}},
    }


def test_a_read_write_once_home_claim_degrades_and_nothing_is_created(operator, control_plane, namespace):
    cp = control_plane
    cp.kubectl("apply", "-f", "-", input=as_yaml([pvc_manifest(namespace, "homes", "ReadWriteOnce")]))
    docs = documents_in(namespace)
    docs[0]["spec"]["storage"] = {"home": {"existingClaim": {"name": "homes"}}}
    apply_example(cp, namespace, docs)
    degraded = degraded_with(cp, namespace, "StorageNotUsable")
    assert degraded["message"].startswith("step CheckStorage: spec.storage.home.existingClaim.name: PersistentVolumeClaim "
                                          f"{namespace}/homes has access modes ['ReadWriteOnce']"), degraded["message"]
    # nothing half made: not even the Secrets
    assert get(cp, "secret", "research-auth-key", namespace) is None
    assert get(cp, "statefulset", "research-login", namespace) is None
    # access modes cannot change: the site makes a ReadWriteMany claim and names it
    cp.kubectl("apply", "-f", "-", input=as_yaml([pvc_manifest(namespace, "homes-rwx", "ReadWriteMany")]))
    docs[0]["spec"]["storage"] = {"home": {"existingClaim": {"name": "homes-rwx"}}}
    apply_example(cp, namespace, docs)
    login = eventually(lambda: get(cp, "statefulset", "research-login", namespace), what="login StatefulSet after the fix")
    volumes = {v["name"]: v for v in login["spec"]["template"]["spec"]["volumes"]}
    assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "homes-rwx"}


def test_an_operator_made_home_claim_outlives_its_cluster_and_comes_back_with_it(operator, control_plane, namespace):
    cp = control_plane
    docs = documents_in(namespace)
    docs[0]["spec"]["storage"] = {"home": {"newClaim": {"size": "5Gi"}}}
    apply_example(cp, namespace, docs)
    claim = eventually(lambda: get(cp, "pvc", "research-home", namespace), what="the home claim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert not claim["metadata"].get("ownerReferences")
    eventually(lambda: get(cp, "statefulset", "research-login", namespace), what="login StatefulSet")
    cp.kubectl("delete", "slurmcluster", "research", "-n", namespace, "--wait=true", "--timeout=60s")
    # everything of the old cluster collected (its NodeSets' objects last), all but the kept claim
    def collected():
        left = cp.kubectl("get", "nodesets,statefulsets,services", "-n", namespace, "-o", "name").stdout.split()
        return not left
    eventually(collected, timeout=180, what="the old cluster's objects collected")
    kept = get(cp, "pvc", "research-home", namespace)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"], "the researchers' files went with the cluster"
    # the same cluster again takes its claim back instead of refusing it as someone else's
    apply_example(cp, namespace, docs)
    eventually(lambda: get(cp, "statefulset", "research-login", namespace), what="login StatefulSet of the new cluster")

    def not_degraded():
        cluster = get(cp, "slurmcluster", "research", namespace)
        degraded = condition(cluster, "Degraded")
        return cluster.get("status", {}).get("observedGeneration") and (not degraded or degraded["status"] == "False")
    eventually(not_degraded, timeout=60, what="the new cluster reconciled without Degraded (no ObjectNotOurs for its kept claim)")
    assert get(cp, "pvc", "research-home", namespace)["metadata"]["uid"] == claim["metadata"]["uid"]
    # keepOnDelete: false hands the claim to the cluster: it goes with it
    docs[0]["spec"]["storage"]["home"]["newClaim"]["keepOnDelete"] = False
    apply_example(cp, namespace, docs)
    eventually(lambda: (get(cp, "pvc", "research-home", namespace)["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "SlurmCluster",
               what="the claim owned by the cluster")


def test_the_ssh_host_key_is_made_once_and_the_service_has_the_type_asked_for(operator, control_plane, namespace):
    cp = control_plane
    docs = documents_in(namespace)
    docs[0]["spec"]["login"]["ssh"] = {"service": {"type": "NodePort", "annotations": {"example.com/lb": "internal"}}}
    apply_example(cp, namespace, docs)
    secret = eventually(lambda: get(cp, "secret", "research-ssh-host-keys", namespace), what="the host key Secret")
    assert secret["immutable"] is True and list(secret["data"]) == ["ssh_host_ed25519_key"]
    service = eventually(lambda: get(cp, "service", "research-ssh", namespace), what="the ssh Service")
    assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["port"] == 22
    assert service["metadata"]["annotations"]["example.com/lb"] == "internal"
    # a spec change re-renders the login pods, never the key
    docs[0]["spec"]["login"]["replicas"] = 2
    apply_example(cp, namespace, docs)
    eventually(lambda: get(cp, "statefulset", "research-login", namespace)["spec"]["replicas"] == 2, what="2 login pods")
    assert get(cp, "secret", "research-ssh-host-keys", namespace)["metadata"]["uid"] == secret["metadata"]["uid"]
    # ssh off: the Service goes (pruned), the login pods run no sshd
    docs[0]["spec"]["login"]["ssh"] = {"enabled": False}
    apply_example(cp, namespace, docs)
    eventually(lambda: get(cp, "service", "research-ssh", namespace) is None, what="the ssh Service pruned")
    login = get(cp, "statefulset", "research-login", namespace)["spec"]["template"]["spec"]["containers"][0]
    assert login["command"] == ["sleep", "infinity"]


def test_replace_unhealthy_keeps_new_pods_off_a_node_with_a_listed_condition_until_it_clears(operator, control_plane, namespace):
    """The exclusion of replaceUnhealthy against the API server: a Node whose GPUProblem=True (as
    node-problem-detector writes it, on the status subresource) is excluded by name from the pod
    template of the NodeSet that replaces, not from the other's, and the exclusion goes once the
    condition clears. Nothing runs the pods in this tier: Slurm's side is in the e2e story."""
    cp = control_plane
    docs = documents_in(namespace)
    cluster, h100, cpu = docs
    cluster["spec"]["nodeHealth"] = {"drainOnNodeConditions": [{"type": "GPUProblem"}]}
    h100["spec"]["replaceUnhealthy"] = True
    node = f"gpu-node-{namespace}"
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))

    def gpu_problem(status):
        cp.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps(
            {"status": {"conditions": [{"type": "GPUProblem", "status": status, "reason": "XidError", "message": "Xid 79"}]}}))

    def exclusion(name):
        spec = get(cp, "statefulset", name, namespace)["spec"]["template"]["spec"]
        terms = spec.get("affinity", {}).get("nodeAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
        return [f for term in terms for f in term.get("matchFields", [])]

    try:
        apply_example(cp, namespace, docs)
        wait_for_objects(cp, namespace)
        assert exclusion("h100") == []
        gpu_problem("True")
        eventually(lambda: exclusion("h100") == [{"key": "metadata.name", "operator": "NotIn", "values": [node]}],
                   timeout=60, what=f"h100's pods kept off {node}")
        assert exclusion("cpu") == []
        gpu_problem("False")
        eventually(lambda: exclusion("h100") == [], timeout=60, what=f"the exclusion of {node} lifted")
    finally:
        cp.kubectl("delete", "node", node, "--ignore-not-found")


def test_ldap_mode_renders_sssd_from_the_named_secret_and_ca_and_refuses_what_is_missing_or_bad(operator, control_plane, namespace):
    from testbed.directory import new_ca

    cp = control_plane
    docs = documents_in(namespace)
    docs[0]["spec"]["identity"] = {"mode": "ldap", "ldap": {
        "uris": ["ldap://directory.example.org"], "searchBase": "dc=example,dc=org", "bindDN": "cn=sssd,dc=example,dc=org",
        "bindPasswordSecretRef": {"name": "sssd-bind"}, "caCertificate": {"configMap": {"name": "site-ca"}}}}
    apply_example(cp, namespace, docs)

    def degraded_with(reason):
        def check():
            found = condition(get(cp, "slurmcluster", "research", namespace), "Degraded")
            return found if found and found["status"] == "True" and found["reason"] == reason else None
        return check
    missing = eventually(degraded_with("DirectorySettingMissing"), timeout=60, what="Degraded: the bind password Secret is missing")
    assert "spec.identity.ldap.bindPasswordSecretRef" in missing["message"] and "sssd-bind" in missing["message"]
    assert get(cp, "statefulset", "research-login", namespace) is None, "nothing is applied without the directory settings"

    password = "Bind-pw-of-the-test"
    cp.kubectl("create", "secret", "generic", "sssd-bind", "-n", namespace, f"--from-literal=password={password}")
    cp.kubectl("create", "configmap", "site-ca", "-n", namespace, "--from-literal=ca.crt=not a certificate")
    bad_ca = eventually(degraded_with("DirectorySettingInvalid"), timeout=60, what="Degraded: the CA is no certificate")
    assert "spec.identity.ldap.caCertificate.configMap" in bad_ca["message"] and "site-ca" in bad_ca["message"]

    ca = new_ca().certificate_pem
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                                         "metadata": {"name": "site-ca", "namespace": namespace}, "data": {"ca.crt": ca}}))
    secret = eventually(lambda: get(cp, "secret", "research-sssd", namespace), timeout=60, what="the Secret research-sssd")
    files = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert files["ca.crt"] == ca and f"ldap_default_authtok = {password}" in files["sssd.conf"]
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "SlurmCluster"
    wait_for_objects(cp, namespace)
    for name in ("research-controller", "research-accounting", "research-login", "h100", "cpu"):
        template = get(cp, "statefulset", name, namespace)["spec"]["template"]
        sidecar = next(c for c in template["spec"]["initContainers"] if c["name"] == "sssd")
        assert sidecar["restartPolicy"] == "Always", name  # the API server keeps a native sidecar
        assert "kubeslurm.io/sssd-config-hash" in template["metadata"]["annotations"], name
    config_maps = json.loads(cp.kubectl("get", "configmaps", "-n", namespace, "-o", "json").stdout)
    assert password not in json.dumps(config_maps), "the bind password is in a ConfigMap"
    assert password not in json.dumps(json.loads(cp.kubectl("get", "statefulsets", "-n", namespace, "-o", "json").stdout))
    # a new password rolls the pods: the hash in the templates changes, the Secret follows
    before = get(cp, "statefulset", "research-login", namespace)["spec"]["template"]["metadata"]["annotations"]["kubeslurm.io/sssd-config-hash"]
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Secret",
                                                         "metadata": {"name": "sssd-bind", "namespace": namespace},
                                                         "stringData": {"password": "a-new-Bind-pw"}}))
    eventually(lambda: get(cp, "statefulset", "research-login", namespace)["spec"]["template"]["metadata"]["annotations"]
               ["kubeslurm.io/sssd-config-hash"] != before, timeout=90, what="the login template's sssd hash changed")
    assert "ldap_default_authtok = a-new-Bind-pw" in base64.b64decode(
        get(cp, "secret", "research-sssd", namespace)["data"]["sssd.conf"]).decode()
    # the bind password may not be one of the operator's own Secrets
    docs[0]["spec"]["identity"]["ldap"]["bindPasswordSecretRef"] = {"name": "research-auth-key", "key": "slurm.key"}
    apply_example(cp, namespace, docs)
    untrusted = eventually(degraded_with("UntrustedSecret"), timeout=60, what="Degraded: the bind password is the auth key")
    assert "spec.identity.ldap.bindPasswordSecretRef" in untrusted["message"]
