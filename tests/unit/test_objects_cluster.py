"""The Kubernetes objects of a SlurmCluster: ownership, labels, names, accounting variants, secrets."""

import base64
import json

import pytest

from kubeslurm import ownership
from kubeslurm.api import load_documents
from kubeslurm.render.cluster_objects import cluster_objects, desired_objects, node_set_objects
from kubeslurm.render.conf_server import once_slurmctld_listens
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.config_hash import CONFIG_HASH_ANNOTATION, config_hash_key
from kubeslurm.render.k8s.metadata import owner_reference
from kubeslurm.render.k8s.secrets import auth_key_secret, database_password_secret

from .manifests import DELETE, contract_documents, load_with_uids, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
PASSWORD = "s3cret-Password-value"
KEY = bytes(range(256)) * 4  # 1024 bytes, like the handler's
HASH_KEY = config_hash_key(KEY)


def everything(cluster_doc=CLUSTER, node_set_docs=(GPU_NODES, CPU_NODES), password=PASSWORD) -> list[dict]:
    """What the cluster owns: desired_objects without the NodeSets' owner references, plus the Secrets made once."""
    cluster, node_sets = load_with_uids(cluster_doc, *node_set_docs)
    objects = [
        o for o in desired_objects(cluster, node_sets, database_password=password, config_hash_key=HASH_KEY)
        if o["kind"] != "NodeSet"
    ]
    return objects + [auth_key_secret(cluster, KEY), database_password_secret(cluster, PASSWORD)]


def test_desired_objects_are_the_cluster_s_then_each_node_set_s_then_their_owner_references():
    cluster, node_sets = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    desired = desired_objects(cluster, node_sets, database_password=PASSWORD, config_hash_key=HASH_KEY, replicas={"h100": 5})
    expected = cluster_objects(cluster, node_sets, database_password=PASSWORD, config_hash_key=HASH_KEY)
    for node_set in node_sets:
        expected += node_set_objects(cluster, node_set, replicas=5 if node_set.metadata.name == "h100" else None)
    assert desired[: len(expected)] == expected
    stubs = desired[len(expected):]
    assert [(s["kind"], s["metadata"]["name"]) for s in stubs] == [("NodeSet", ns.metadata.name) for ns in node_sets]
    assert all(s["metadata"]["ownerReferences"] == [owner_reference(cluster)] for s in stubs)
    replicas = {o["metadata"]["name"]: o["spec"]["replicas"] for o in desired if o["kind"] == "StatefulSet"}
    assert replicas[naming.node_set_statefulset("h100")] == 5
    assert replicas[naming.node_set_statefulset("cpu")] == next(ns for ns in node_sets if ns.metadata.name == "cpu").spec.replicas


def find(objects: list[dict], kind: str, name: str) -> dict | None:
    return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)


def names_of(objects: list[dict]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def test_every_object_is_owned_namespaced_and_labelled():
    for obj in everything():
        meta = obj["metadata"]
        assert meta["namespace"] == "hpc"
        assert ownership.kind_of(obj) in ownership.OWNED_KINDS and ownership.kind_of(obj).api_version == obj["apiVersion"]
        [owner] = meta["ownerReferences"]
        assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
        assert owner["apiVersion"] == "kubeslurm.io/v1alpha1"
        node_set = meta["labels"].get(labels.NODE_SET)
        expected_owner = ("NodeSet", node_set) if node_set else ("SlurmCluster", "research")
        assert (owner["kind"], owner["name"]) == expected_owner
        assert owner["uid"] == f"uid-of-{owner['kind']}-{owner['name']}"
        assert {
            labels.NAME: "slurm", labels.INSTANCE: "research", labels.MANAGED_BY: "kubeslurm", labels.CLUSTER: "research"
        }.items() <= meta["labels"].items()
        component = meta["labels"].get(labels.COMPONENT)
        # the key and the users are every Slurm pod's: no one component
        assert component in labels.COMPONENTS or meta["name"] in ("research-auth-key", "research-unix-users")


def test_owner_reference_needs_the_uid_the_api_server_assigned():
    cluster = load_documents([CLUSTER]).clusters[0]
    with pytest.raises(ValueError, match="metadata.uid"):
        owner_reference(cluster)


def test_pods_select_by_their_template_labels():
    for obj in everything():
        if obj["kind"] == "StatefulSet":
            selector = obj["spec"]["selector"]["matchLabels"]
            assert selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
    objects = everything()
    services = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Service"}
    # Virtual IPs for the daemons Slurm addresses by name: they survive the pods (naming.controller_hosts).
    virtual = {"research-slurmctld-0": "research-controller", "research-slurmdbd": "research-accounting",
               "research-database": "research-mariadb"}
    for name, spec in services.items():
        if name == "research-ssh":  # where researchers ssh to: a ClusterIP Service of the login pods
            assert spec["type"] == "ClusterIP" and spec["selector"] == {**labels.selector_labels("research", labels.LOGIN)}
            continue
        if name not in virtual:
            assert spec["clusterIP"] == "None", name
            continue
        assert "clusterIP" not in spec, name
        pod_labels = find(objects, "StatefulSet", virtual[name])["spec"]["template"]["metadata"]["labels"]
        selector = dict(spec["selector"])
        if name == "research-slurmctld-0":
            assert selector.pop("statefulset.kubernetes.io/pod-name") == "research-controller-0"
        assert selector.items() <= pod_labels.items(), name
        # Not-ready pods too: each daemon listens only once it can serve (its readiness is that
        # listening), and whoever waits for it polls the address (slurmdbd's container, a first slurmctld).
        assert spec["publishNotReadyAddresses"] is True, name


LONGEST = "a" * 40


def test_names_fit_kubernetes_limits_for_the_longest_allowed_names():
    cluster = set_path(set_path(set_path(CLUSTER, "metadata.name", LONGEST), "spec.controller.backup", True), "spec.partitions", [])
    cluster = set_path(cluster, "spec.login.replicas", 16)
    node_set = set_path(set_path(GPU_NODES, "metadata.name", "b" * 40), "spec.clusterName", LONGEST)
    node_set = set_path(set_path(node_set, "spec.maxReplicas", 1024), "spec.replicas", 1024)
    for obj in everything(cluster, (node_set,)):
        name = obj["metadata"]["name"]
        assert len(name) <= 63, name
        assert all(len(value) <= 63 for value in obj["metadata"]["labels"].values())
        if obj["kind"] == "StatefulSet":
            # pod names are host names (Slurm node names); the revision label is <statefulset>-<10-char hash>
            assert len(f"{name}-{obj['spec']['replicas'] - 1}") <= 63
            assert len(f"{name}-{'h' * 10}") <= 63
            for claim in obj["spec"].get("volumeClaimTemplates", []):
                assert len(f"{claim['metadata']['name']}-{name}-0") <= 63


def _component_objects(objects, component):
    return {(o["kind"], o["metadata"]["name"]) for o in objects if o["metadata"]["labels"].get(labels.COMPONENT) == component}


@pytest.mark.parametrize(
    "accounting,expect_accounting,expect_database",
    [
        ({"enabled": True, "database": {"internal": {"size": "2Gi"}}}, True, True),
        ({"enabled": True, "database": {"external": {"host": "db.example.org", "passwordSecretRef": {"name": "dbpw"}}}}, True, False),
        ({"enabled": False}, False, False),
    ],
)
def test_accounting_objects_follow_the_spec(accounting, expect_accounting, expect_database):
    cluster = set_path(CLUSTER, "spec.accounting", accounting)
    if not accounting["enabled"]:
        cluster = set_path(cluster, "spec.accounts", [])
    objects = everything(cluster)[:-2]  # the created-once Secrets are the handler's choice
    assert bool(_component_objects(objects, labels.ACCOUNTING)) == expect_accounting
    assert bool(_component_objects(objects, labels.DATABASE)) == expect_database
    if expect_database:
        assert names_of(objects) >= {("StatefulSet", "research-mariadb"), ("Service", "research-mariadb")}
    # slurmctld's first start waits for slurmdbd only when there is one to wait for
    [slurmctld] = find(objects, "StatefulSet", "research-controller")["spec"]["template"]["spec"]["containers"]
    assert ("research-slurmdbd" in slurmctld["command"]) == expect_accounting
    if not expect_accounting:
        assert slurmctld["command"] == ["slurmctld", "-D", "-i"]


def _slurmdbd_conf(objects) -> str:
    secret = find(objects, "Secret", "research-slurmdbd-config")
    return base64.b64decode(secret["data"]["slurmdbd.conf"]).decode()


def test_external_database_is_what_slurmdbd_talks_to():
    external = {"host": "db.example.org", "port": 3307, "passwordSecretRef": {"name": "dbpw"}}
    objects = everything(set_path(CLUSTER, "spec.accounting.database", {"external": external}))
    conf = _slurmdbd_conf(objects)
    assert "StorageHost=db.example.org\n" in conf and "StoragePort=3307\n" in conf
    assert f"StoragePass={PASSWORD}\n" in conf


def test_internal_database_gets_its_password_by_reference_only():
    objects = everything()
    assert "StorageHost=research-database\n" in _slurmdbd_conf(objects)
    pod = find(objects, "StatefulSet", "research-mariadb")["spec"]["template"]["spec"]
    mariadb = pod["containers"][0]
    env = {e["name"]: e for e in mariadb["env"]}
    # a file, not an environment variable: mariadbd and its children would inherit that
    assert "MARIADB_PASSWORD" not in env and all("valueFrom" not in e for e in env.values())
    password_file = env["MARIADB_PASSWORD_FILE"]["value"]
    (mount,) = [m for m in mariadb["volumeMounts"] if password_file.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {
        "secretName": "research-mariadb-password",
        "items": [{"key": "password", "path": password_file.rsplit("/", 1)[1]}],
        "defaultMode": 0o400,  # root's alone: the entrypoint reads it before mariadbd drops to mysql
    }
    assert env["MARIADB_DATABASE"]["value"] == "slurm_acct_db" and env["MARIADB_USER"]["value"] == "slurm"
    assert env["MARIADB_RANDOM_ROOT_PASSWORD"]["value"] == "1"
    claim = find(objects, "StatefulSet", "research-mariadb")["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"


def test_accounting_without_a_password_is_refused():
    cluster, node_sets = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    with pytest.raises(ValueError, match="database password"):
        cluster_objects(cluster, node_sets, database_password=None)


def test_no_secret_bytes_outside_the_secrets_data():
    needles = [base64.b64encode(KEY).decode(), PASSWORD, base64.b64encode(PASSWORD.encode()).decode()]
    for obj in everything():
        visible = {k: v for k, v in obj.items() if not (obj["kind"] == "Secret" and k == "data")}
        text = json.dumps(visible)
        assert not any(needle in text for needle in needles), (obj["kind"], obj["metadata"]["name"])


def test_created_once_secrets_wrap_the_given_bytes_immutably():
    cluster, _ = load_with_uids(CLUSTER)
    key_secret = auth_key_secret(cluster, KEY)
    assert base64.b64decode(key_secret["data"]["slurm.key"]) == KEY and key_secret["immutable"] is True
    password_secret = database_password_secret(cluster, PASSWORD)
    assert base64.b64decode(password_secret["data"]["password"]).decode() == PASSWORD
    with pytest.raises(ValueError):
        auth_key_secret(cluster, b"")


@pytest.mark.parametrize("backup,replicas,access_mode", [(False, 1, "ReadWriteOnce"), (True, 2, "ReadWriteMany")])
def test_backup_controller(backup, replicas, access_mode):
    objects = everything(set_path(CLUSTER, "spec.controller.backup", backup))
    controller = find(objects, "StatefulSet", "research-controller")
    assert controller["spec"]["replicas"] == replicas
    assert controller["spec"]["serviceName"] == "research-controller"
    claim = find(objects, "PersistentVolumeClaim", "research-controller-state")
    assert claim["spec"]["accessModes"] == [access_mode]
    # one claim shared by primary and backup, not one per pod
    assert "volumeClaimTemplates" not in controller["spec"]
    assert (find(objects, "PodDisruptionBudget", "research-controller") is not None) == backup


@pytest.mark.parametrize("backup", [False, True])
def test_a_backup_controller_is_kept_off_the_primary_s_node_where_there_is_room(backup):
    controller = find(everything(set_path(CLUSTER, "spec.controller.backup", backup)), "StatefulSet", "research-controller")
    template = controller["spec"]["template"]
    affinity = template["spec"].get("affinity")
    if not backup:
        assert affinity is None
        return
    # Preferred, not required: a one-node cluster still runs both slurmctld pods.
    assert set(affinity) == {"podAntiAffinity"} and set(affinity["podAntiAffinity"]) == {
        "preferredDuringSchedulingIgnoredDuringExecution"}
    [preference] = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    term = preference["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    # It selects exactly this cluster's controller pods: the primary and the backup repel each other.
    selector = term["labelSelector"]["matchLabels"]
    assert selector == controller["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()


def test_controller_pod_layout():
    objects = everything()
    controller = find(objects, "StatefulSet", "research-controller")
    pod = controller["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    script = init["command"][-1]
    assert "install -o slurm -g slurm -m 0600 /etc/slurm-key/slurm.key /etc/slurm/slurm.key" in script
    assert "install -o slurm -g slurm -m 0644" in script and "chown slurm:slurm /var/spool/slurmctld" in script
    [slurmctld] = pod["containers"]
    # accounting on (the contract manifest): a first start waits for slurmdbd, then execs slurmctld
    assert slurmctld["command"][:2] == ["/bin/sh", "-c"]
    assert slurmctld["command"][3:] == ["slurmctld", "research-slurmdbd", "6819", "-D", "-i"]
    assert "/var/spool/slurmctld/clustername" in slurmctld["command"][2]
    assert slurmctld["command"][2].endswith('exec slurmctld "$@"')
    # the accounts' users (alice, bob in the contract manifest): /etc/passwd, /etc/group, /home
    assert {m["mountPath"] for m in slurmctld["volumeMounts"]} == {
        "/etc/slurm", "/var/spool/slurmctld", "/etc/passwd", "/etc/group", "/home"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["slurm-config"]["configMap"]["name"] == "research-slurm-config"
    assert volumes["slurm-key"]["secret"]["secretName"] == "research-auth-key"
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "research-controller-state"
    config_map = find(objects, "ConfigMap", "research-slurm-config")
    assert set(config_map["data"]) == {"slurm.conf", "gres.conf", "cgroup.conf"}


@pytest.mark.parametrize(
    "name,port,publish_not_ready",
    [("research-controller", 6817, True), ("research-accounting", 6819, False), ("research-mariadb", 3306, False), ("h100", 6818, True)],
)
def test_headless_services(name, port, publish_not_ready):
    service = find(everything(), "Service", name)
    assert [p["port"] for p in service["spec"]["ports"]] == [port]
    assert service["spec"].get("publishNotReadyAddresses", False) is publish_not_ready


@pytest.mark.parametrize("replicas", [0, 1, 3])
def test_login_replicas_and_sackd(replicas):
    login = find(everything(set_path(CLUSTER, "spec.login.replicas", replicas)), "StatefulSet", "research-login")
    assert login["spec"]["replicas"] == replicas
    container = next(c for c in login["spec"]["template"]["spec"]["containers"] if c["name"] == "sackd")
    # Absolute path and -D: sackd re-executes argv[0] in place on `scontrol reconfigure`;
    # started once slurmctld listens (test_conf_server.py runs that command).
    assert container["command"] == once_slurmctld_listens("/usr/sbin/sackd", ["-D", "--conf-server", "research-slurmctld-0:6817"])
    assert container["command"][-4:] == ["/usr/sbin/sackd", "-D", "--conf-server", "research-slurmctld-0:6817"]
    assert "env" not in container


def test_login_sessions_run_apart_from_the_key_and_cannot_escalate():
    pod = find(everything(), "StatefulSet", "research-login")["spec"]["template"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert list(containers) == ["login", "sackd"]
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "login"
    sessions, sackd = containers["login"], containers["sackd"]
    # the key lives in /etc/slurm: only sackd mounts it
    assert "/etc/slurm" not in {m["mountPath"] for m in sessions["volumeMounts"]}
    assert "slurm-etc" not in {m["name"] for m in sessions["volumeMounts"]}
    assert {m["mountPath"] for m in sackd["volumeMounts"]} == {"/etc/slurm", "/run/slurm"}
    assert "/run/slurm" in {m["mountPath"] for m in sessions["volumeMounts"]}  # the socket and the configs
    assert sessions["securityContext"]["allowPrivilegeEscalation"] is False
    # sackd as SlurmUser: slurmctld's config push is signed for it
    assert sackd["securityContext"] == {"runAsUser": 64030, "runAsGroup": 64030, "allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}}
    [init] = pod["spec"]["initContainers"]
    assert "chown slurm:slurm /run/slurm" in init["command"][-1]


def _config_hash(objects, name):
    return find(objects, "StatefulSet", name)["spec"]["template"]["metadata"]["annotations"].get(CONFIG_HASH_ANNOTATION)


def test_a_partition_change_rolls_slurmctld_but_not_slurmd():
    before = everything()
    after = everything(set_path(CLUSTER, "spec.partitions.0.maxTime", "2-00:00:00"))
    assert _config_hash(before, "research-controller") != _config_hash(after, "research-controller")
    for name in ("h100", "cpu", "research-login"):
        assert find(before, "StatefulSet", name)["spec"]["template"] == find(after, "StatefulSet", name)["spec"]["template"]
        assert _config_hash(after, name) is None
    assert _config_hash(before, "research-accounting") == _config_hash(after, "research-accounting")


def test_a_database_change_rolls_slurmdbd_only():
    before = everything()
    after = everything(password="another-password")
    assert _config_hash(before, "research-accounting") != _config_hash(after, "research-accounting")
    assert _config_hash(before, "research-controller") == _config_hash(after, "research-controller")


# Pointer fields keep an explicit false; the API server drops false and empty values
# of the others, so a desired false there would look like drift on every reconcile.
FALSE_IS_KEPT = {"automountServiceAccountToken", "enableServiceLinks", "allowPrivilegeEscalation"}


def _fields_the_api_server_drops(node, path=""):
    if isinstance(node, dict):
        if not node and not path.endswith("emptyDir"):
            yield path
        for key, value in node.items():
            if value is False and key not in FALSE_IS_KEPT or value is None or value == []:
                yield f"{path}.{key}"
            yield from _fields_the_api_server_drops(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _fields_the_api_server_drops(item, f"{path}[{index}]")


def test_no_field_the_api_server_would_drop():
    variants = [CLUSTER, set_path(CLUSTER, "spec.controller.backup", True), set_path(set_path(CLUSTER, "spec.accounting", {"enabled": False}), "spec.accounts", [])]
    for cluster in variants:
        for obj in everything(cluster):
            assert list(_fields_the_api_server_drops(obj)) == [], (obj["kind"], obj["metadata"]["name"])


def test_same_input_same_objects():
    first, second = everything(), everything()
    assert first == second
    assert json.dumps(first) == json.dumps(second)


def test_topology_placements_reach_the_config_map():
    cluster = set_path(CLUSTER, "spec.topology", {"plugin": "block", "nodeLabels": ["example.com/nvlink"]})
    model, node_sets = load_with_uids(cluster, GPU_NODES, CPU_NODES)
    placements = {"h100-0": {"example.com/nvlink": "d1"}, "h100-1": {"example.com/nvlink": "d1"}}
    objects = cluster_objects(model, node_sets, database_password=PASSWORD, config_hash_key=HASH_KEY, placements=placements)
    topology = find(objects, "ConfigMap", "research-slurm-config")["data"]["topology.conf"]
    assert "BlockName=b-d1 Nodes=h100-0,h100-1" in topology


def test_conf_server_lists_every_controller():
    assert naming.conf_server("research", backup=True) == (
        "research-slurmctld-0:6817,research-slurmctld-1:6817"
    )


def test_a_cluster_without_a_login_spec_gets_one_login_pod():
    login = find(everything(set_path(CLUSTER, "spec.login", DELETE)), "StatefulSet", "research-login")
    assert login["spec"]["replicas"] == 1


# The accounts' Unix users exist in every Slurm pod with the same uid.
SLURM_STATEFULSETS = ["research-controller", "research-accounting", "research-login", "h100", "cpu"]


def test_account_users_exist_in_every_slurm_pod_with_stable_uids():
    objects = everything()
    scripts = {}
    for name in SLURM_STATEFULSETS:
        pod = find(objects, "StatefulSet", name)["spec"]["template"]["spec"]
        init = next(c for c in pod["initContainers"] if c["name"] == "install-config")
        scripts[name] = init["command"][-1]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["unix-users"] == {"name": "unix-users", "emptyDir": {}}
        assert volumes["unix-users-table"] == {"name": "unix-users-table",
                                               "configMap": {"name": "research-unix-users", "defaultMode": 0o444}}
        assert volumes["home"] == {"name": "home", "emptyDir": {}}
        assert {"name": "unix-users", "mountPath": "/etc/kubeslurm-users"} in init["volumeMounts"]
        assert {"name": "unix-users-table", "mountPath": "/etc/kubeslurm-unix-users", "readOnly": True} in init["volumeMounts"]
        daemon = pod["containers"][0]
        assert {"name": "unix-users", "mountPath": "/etc/passwd", "subPath": "passwd", "readOnly": True} in daemon["volumeMounts"]
        assert {"name": "unix-users", "mountPath": "/etc/group", "subPath": "group", "readOnly": True} in daemon["volumeMounts"]
    from kubeslurm.render.slurm_pod import account_users
    cluster, *_ = load_with_uids(CLUSTER)
    users = account_users(cluster)
    assert list(users) == ["alice", "bob"]
    table = find(objects, "ConfigMap", "research-unix-users")["data"]["users"]
    assert table == "".join(f"{user} {uid}\n" for user, uid in users.items())
    for name, script in scripts.items():
        assert "while read -r name uid; do" in script and "done < /etc/kubeslurm-unix-users/users" in script, name
        assert '  getent passwd "$name" >/dev/null && continue' in script, name
        assert '  echo "$name:x:$uid:$uid:kubeslurm account user:/home/$name:/bin/bash" >> /etc/kubeslurm-users/passwd' in script, name


def test_a_user_keeps_its_uid_when_others_come_and_go():
    from kubeslurm.render.slurm_pod import FIRST_UID, UID_SLOTS, account_users
    cluster, *_ = load_with_uids(CLUSTER)
    more, *_ = load_with_uids(set_path(CLUSTER, "spec.accounts", [
        {"name": "vision", "users": ["alice", "carol", "dave"]}, {"name": "nlp", "users": ["erin"]}]))
    assert account_users(cluster)["alice"] == account_users(more)["alice"]
    assert all(FIRST_UID <= uid < FIRST_UID + UID_SLOTS for uid in account_users(more).values())
    assert len(set(account_users(more).values())) == 4


def test_no_account_users_no_user_volumes():
    objects = everything(set_path(CLUSTER, "spec.accounts", []))
    pod = find(objects, "StatefulSet", "research-login")["spec"]["template"]["spec"]
    assert "unix-users" not in {v["name"] for v in pod["volumes"]}
    assert "/etc/passwd" not in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "getent" not in pod["initContainers"][0]["command"][-1]


def test_slurmdbd_starts_only_once_the_database_accepts_connections():
    """In slurmdbd's own container, not an init container (whose exit the kubelet notices only at
    its next relist); the script's behaviour: test_slurmdbd_start.py."""
    objects = everything()
    pod = find(objects, "StatefulSet", "research-accounting")["spec"]["template"]["spec"]
    [slurmdbd] = pod["containers"]
    assert slurmdbd["command"][:2] == ["/bin/bash", "-c"] and slurmdbd["command"][3:] == ["slurmdbd-start", "slurmdbd", "-D"]
    script = slurmdbd["command"][2]
    # the address reaches the shell as data (env), never as script text
    assert {"name": "DATABASE_HOST", "value": "research-database"} in slurmdbd["env"]
    assert {"name": "DATABASE_PORT", "value": "3306"} in slurmdbd["env"]
    assert {"name": "SLURMDBD_PORT", "value": str(naming.SLURMDBD_PORT)} in slurmdbd["env"]
    assert """until timeout 3 bash -c '< "/dev/tcp/$0/$1"' "$DATABASE_HOST" "$DATABASE_PORT" """ in script
    assert "research-database" not in script
    assert script.index('"$DATABASE_PORT"') < script.index('"$@" &')
    # the init container only installs the key and slurmdbd.conf
    [init] = pod["initContainers"]
    assert "/dev/tcp" not in init["command"][-1] and "/etc/slurm-key/slurm.key" in init["command"][-1]


def test_slurmdbd_is_restarted_when_it_never_listens():
    sts = find(everything(), "StatefulSet", "research-accounting")
    [slurmdbd] = sts["spec"]["template"]["spec"]["containers"]
    # generous: a schema conversion after an upgrade also runs before slurmdbd listens
    assert "if [ $tries -ge 1500 ]; then" in slurmdbd["command"][2]
    # the startup probe counts the wait for the database too: only a last resort
    probe = slurmdbd["startupProbe"]
    assert probe["tcpSocket"] == {"port": naming.SLURMDBD_PORT}
    assert probe["periodSeconds"] * probe["failureThreshold"] == 3600


def test_the_database_claim_belongs_to_the_cluster_not_to_its_stateful_set():
    objects = everything()
    claim = find(objects, "PersistentVolumeClaim", naming.database_data_claim("research"))
    statefulset = find(objects, "StatefulSet", naming.database_statefulset("research"))
    assert [ref["kind"] for ref in claim["metadata"]["ownerReferences"]] == ["SlurmCluster"]
    # the pod mounts the claim by its template's name, so both describe the same volume
    [template] = statefulset["spec"]["volumeClaimTemplates"]
    assert f"{template['metadata']['name']}-{statefulset['metadata']['name']}-0" == claim["metadata"]["name"]
    assert template["spec"] == claim["spec"]
    # turning accounting off prunes the StatefulSet: it must not take the data along
    assert statefulset["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert names.index(("PersistentVolumeClaim", claim["metadata"]["name"])) < names.index(("StatefulSet", statefulset["metadata"]["name"]))


def test_every_pod_runs_under_the_runtime_s_default_seccomp_profile():
    templates = [o["spec"]["template"] for o in everything() if o["kind"] == "StatefulSet"]
    assert len(templates) == 6
    for template in templates:
        assert template["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_only_slurmdbd_may_reach_the_database():
    policy = find(everything(), "NetworkPolicy", "research-mariadb")
    database = find(everything(), "StatefulSet", "research-mariadb")["spec"]["template"]["metadata"]["labels"]
    slurmdbd = find(everything(), "StatefulSet", "research-accounting")["spec"]["template"]["metadata"]["labels"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= database.items() and not selected.items() <= slurmdbd.items()
    [rule] = policy["spec"]["ingress"]
    [source] = rule["from"]
    assert source["podSelector"]["matchLabels"].items() <= slurmdbd.items()
    assert not source["podSelector"]["matchLabels"].items() <= database.items()
    assert rule["ports"] == [{"protocol": "TCP", "port": 3306}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # no internal database, no policy (the prune removes it with the StatefulSet)
    external = set_path(CLUSTER, "spec.accounting.database", {"external": {"host": "db.example.org", "passwordSecretRef": {"name": "db"}}})
    assert find(everything(external), "NetworkPolicy", "research-mariadb") is None


def test_every_probed_daemon_turns_ready_within_a_second_of_answering_at_start():
    """Each container with a readiness probe has a startup probe every second (the kubelet runs the
    readiness probe as soon as it passes), so a pod is Ready about a second after its daemon answers,
    not a readiness period later: the same check, or, where the readiness check is an exec, TCP on the
    container's port (the kubelet connects itself; an exec would start a process in the container
    every second while the daemon waits, CPU taken from a new cluster's start chain). Each restarts
    a start only after an hour."""
    checked = 0
    for sts in (o for o in everything() if o["kind"] == "StatefulSet"):
        for container in sts["spec"]["template"]["spec"]["containers"]:
            readiness = container.get("readinessProbe")
            if not readiness:
                continue
            startup = container["startupProbe"]
            check = {k: v for k, v in readiness.items() if k in ("exec", "tcpSocket", "httpGet")}
            if "exec" in check:
                [port] = [p["containerPort"] for p in container["ports"]]
                check = {"tcpSocket": {"port": port}}
            assert {k: startup.get(k) for k in check} == check, (sts["metadata"]["name"], container["name"])
            assert "exec" not in startup
            assert startup["periodSeconds"] == 1 and readiness["periodSeconds"] >= 10
            window = startup["periodSeconds"] * startup["failureThreshold"]
            assert window == 3600, (container["name"], window)
            checked += 1
    assert checked >= 5  # MariaDB, slurmdbd, slurmctld, slurmd (two NodeSets), login's sackd


def test_the_users_lines_add_each_table_user_the_image_lacks_with_a_0700_home(tmp_path):
    """The install-config lines, run by /bin/sh on a table as the ConfigMap holds it (paths moved
    under tmp_path): a user the system knows (root) is skipped; the others get passwd and group
    lines and a home of their own uid, made only where none exists."""
    import os
    import subprocess

    from kubeslurm.render import slurm_pod

    if os.geteuid() != 0:
        pytest.skip("install -o needs root")
    users = (("alice", 420207), ("bob", 500001), ("root", 12))
    (tmp_path / "table").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "home" / "bob").mkdir(parents=True)  # bob's home is there already: left alone
    (tmp_path / "table" / "users").write_text(slurm_pod.users_table(users))
    script = "\n".join(["set -eu", *slurm_pod._users_script(str(tmp_path / "home"), True, slurm_pod.users_digest(users))])
    script = script.replace(slurm_pod.USERS_TABLE_MOUNT, str(tmp_path / "table")).replace(slurm_pod.USERS_DIR, str(tmp_path / "out"))
    subprocess.run(["/bin/sh", "-c", script], check=True)
    passwd = (tmp_path / "out" / "passwd").read_text().splitlines()
    assert f"alice:x:420207:420207:kubeslurm account user:{tmp_path}/home/alice:/bin/bash" in passwd
    assert f"bob:x:500001:500001:kubeslurm account user:{tmp_path}/home/bob:/bin/bash" in passwd
    assert not any(line.startswith("root:x:12:") for line in passwd)
    assert "alice:x:420207:" in (tmp_path / "out" / "group").read_text().splitlines()
    alice = (tmp_path / "home" / "alice").stat()
    assert (alice.st_uid, alice.st_gid, alice.st_mode & 0o777) == (420207, 420207, 0o700)
    assert (tmp_path / "home" / "bob").stat().st_uid == 0


def test_claims_are_applied_first_and_the_start_chain_in_its_order():
    """A pod made before its claim is bound fails to schedule and waits out a scheduler back-off;
    the head of a new cluster's start chain (MariaDB, slurmdbd, slurmctld, slurmd) is made first."""
    objects = everything()
    kinds = [o["kind"] for o in objects]
    claims = kinds.count("PersistentVolumeClaim")
    assert claims >= 2 and kinds[:claims] == ["PersistentVolumeClaim"] * claims, kinds
    assert {naming.database_data_claim("research"), naming.controller_state_claim("research")} <= {
        o["metadata"]["name"] for o in objects[:claims]}
    statefulsets = [o["metadata"]["name"] for o in objects if o["kind"] == "StatefulSet"]
    assert statefulsets[:3] == [naming.database_statefulset("research"), naming.accounting_statefulset("research"),
                                naming.controller_statefulset("research")], statefulsets
