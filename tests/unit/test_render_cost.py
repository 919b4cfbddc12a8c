"""Render's cost follows NodeSets and config size, never replicas x users; what it reuses is never stale.

The accounts' uids (a sha256 per new user, render/unix_ids.py) and the init script that
adds the users are derived once per distinct set of users and shared by every pod
template (see render/slurm_pod.py). These tests count that work and check that reusing it never
changes a rendered byte, however clusters follow one another in one process.
"""

import json

import pytest

from kubeslurm.render import slurm_pod, unix_ids
from kubeslurm.render.cluster_objects import cluster_objects, node_set_objects

from .manifests import contract_documents, load_with_uids, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
HASH_KEY = b"k" * 32  # keys slurmdbd.conf's hash (render/k8s/config_hash.py)


def accounts(users_per_account: int, prefix: str) -> list[dict]:
    return [
        {"name": f"team{a}", "users": [f"{prefix}{a}x{u}" for u in range(users_per_account)]} for a in range(3)
    ]


def node_sets(count: int, replicas: int) -> list[dict]:
    """`count` GPU NodeSets of `replicas` pods; the first is the contract's h100 (its partition needs it)."""
    documents = [set_path(set_path(GPU_NODES, "spec.replicas", replicas), "spec.maxReplicas", max(replicas, 1))]
    for index in range(1, count):
        documents.append(set_path(documents[0], "metadata.name", f"h100x{index}"))
    return documents + [CPU_NODES]


def render(cluster_document: dict, node_set_documents: list[dict]) -> str:
    cluster, models = load_with_uids(cluster_document, *node_set_documents)
    objects = cluster_objects(cluster, models, database_password="pw", config_hash_key=HASH_KEY)
    for node_set in models:
        objects += node_set_objects(cluster, node_set)
    return json.dumps(objects)


def forget_derived_users() -> None:
    unix_ids._assign.cache_clear()
    slurm_pod.users_table.cache_clear()
    slurm_pod.users_digest.cache_clear()
    slurm_pod._install_script.cache_clear()


@pytest.fixture
def sha256_calls(monkeypatch):
    """How many uids render derives: unix_ids hashes each new user name once per derivation."""
    forget_derived_users()
    calls = []
    real = unix_ids.hashlib.sha256

    class CountingHashlib:
        @staticmethod
        def sha256(data):
            calls.append(data)
            return real(data)

    monkeypatch.setattr(unix_ids, "hashlib", CountingHashlib)
    yield calls
    forget_derived_users()


@pytest.mark.parametrize("count, replicas", [(1, 1), (4, 64), (12, 512)])
def test_uids_are_derived_once_per_set_of_users_whatever_the_nodesets_and_replicas(sha256_calls, count, replicas):
    cluster = set_path(CLUSTER, "spec.accounts", accounts(users_per_account=40, prefix="u"))
    render(cluster, node_sets(count, replicas))
    assert len(sha256_calls) == 3 * 40
    # A reconcile re-renders the same cluster: nothing derived again.
    render(cluster, node_sets(count, replicas))
    assert len(sha256_calls) == 3 * 40


def test_the_users_table_is_built_once_and_named_by_every_pod_template(sha256_calls):
    cluster = set_path(CLUSTER, "spec.accounts", accounts(users_per_account=10, prefix="u"))
    objects = json.loads(render(cluster, node_sets(6, 8)))
    assert slurm_pod.users_table.cache_info().misses == 1
    [table] = [o["data"]["users"] for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "research-unix-users"]
    assert "\nu2x9 " in table
    digest = slurm_pod.users_digest.__wrapped__(tuple((line.split()[0], int(line.split()[1])) for line in table.splitlines()))
    scripts = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]
        for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] != "research-mariadb"
    }
    assert len(scripts) == 3 + 7  # controller, accounting, login, 7 NodeSets
    assert all(f"# the users of table {digest} " in script for script in scripts.values())


@pytest.mark.parametrize("users_per_account", [10, 1000])
def test_a_pod_template_is_as_small_with_3000_users_as_with_30(users_per_account):
    """The users are in their ConfigMap, not in every pod template: 3000 users inline were
    about 0.8 MB a template (past about 5000, over etcd's 1.5 MB object limit) and 0.8 GB for
    a list of 1000 pods."""
    cluster = set_path(CLUSTER, "spec.accounts", accounts(users_per_account=users_per_account, prefix="u"))
    objects = json.loads(render(cluster, node_sets(1, 8)))
    templates = [len(json.dumps(o["spec"]["template"])) for o in objects if o["kind"] == "StatefulSet"]
    [table] = [o["data"]["users"] for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "research-unix-users"]
    assert len(table.splitlines()) == 3 * users_per_account
    assert max(templates) < 16_000, templates


def test_clusters_rendered_in_turn_equal_each_rendered_alone():
    """Reused users never leak from one cluster (or one version of it) into another."""
    clusters = [
        set_path(CLUSTER, "spec.accounts", accounts(users_per_account=5, prefix="a")),
        set_path(set_path(CLUSTER, "metadata.name", "other"), "spec.accounts", accounts(users_per_account=7, prefix="b")),
        set_path(CLUSTER, "spec.accounts", accounts(users_per_account=5, prefix="c")),
        set_path(CLUSTER, "spec.accounts", accounts(users_per_account=5, prefix="c") + [{"name": "extra", "users": ["dave"]}]),
        set_path(CLUSTER, "spec.accounts", []),
        set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice", "carol"]}, {"name": "nlp", "users": ["carol", "bob"]}]),
        CLUSTER,
    ]
    sequence = clusters + clusters[::-1]

    def with_node_sets(cluster: dict) -> list[dict]:
        name = cluster["metadata"]["name"]
        return [set_path(doc, "spec.clusterName", name) for doc in node_sets(2, 3)]

    alone = []
    for cluster in sequence:
        forget_derived_users()
        alone.append(render(cluster, with_node_sets(cluster)))
    forget_derived_users()
    in_turn = [render(cluster, with_node_sets(cluster)) for cluster in sequence]
    assert in_turn == alone
    assert len(set(alone)) == len(clusters)


def test_users_added_to_a_model_in_place_are_rendered():
    """The reuse is keyed on the users themselves, not on the model object that holds them."""
    cluster, models = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    before = node_set_objects(cluster, models[0])
    table_before = slurm_pod.users_table(slurm_pod.unix_users(cluster))
    cluster.spec.accounts[0].users.append("zoe")
    after = node_set_objects(cluster, models[0])
    script = lambda objects: objects[1]["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]  # noqa: E731
    assert "zoe " not in table_before and "\nzoe " in "\n" + slurm_pod.users_table(slurm_pod.unix_users(cluster))
    assert script(before) != script(after)  # the template names the new table: the pods restart with zoe
    assert slurm_pod.account_users(cluster)["zoe"] > slurm_pod.FIRST_UID


def clear_every_container(value) -> None:
    """Empty every dict and list reachable from value, innermost first."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in list(children):
        clear_every_container(child)
    if isinstance(value, (dict, list)):
        value.clear()


def test_rendered_objects_share_nothing_mutable_with_later_renders_or_the_models():
    """Render builds slurmd templates without a deep copy: a caller changing one must change nothing else."""
    placement = {
        "nodeSelector": {"example.com/pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    }
    placed = set_path(GPU_NODES, "spec", {**GPU_NODES["spec"], **placement})
    with_template = set_path(CPU_NODES, "spec.podTemplate", {"metadata": {"labels": {"team": "vision"}}})
    cluster, models = load_with_uids(CLUSTER, placed, with_template)
    models_before = [model.model_dump() for model in (cluster, *models)]

    def objects() -> list[dict]:
        rendered = cluster_objects(cluster, models, database_password="pw", config_hash_key=HASH_KEY)
        for node_set in models:
            rendered += node_set_objects(cluster, node_set)
        return rendered

    first = objects()
    expected = json.dumps(first)
    clear_every_container(first)
    assert json.dumps(objects()) == expected
    assert [model.model_dump() for model in (cluster, *models)] == models_before
