import pytest

from kubeslurm.api import ManifestError, load_documents, parse_object

from .manifests import DELETE, contract_documents, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()


def test_contract_manifest_is_accepted_as_written():
    manifests = load_documents(contract_documents())
    (cluster,) = manifests.clusters
    assert cluster.metadata.name == "research"
    assert [a.name for a in cluster.spec.accounts] == ["vision", "nlp"]
    assert cluster.spec.accounts[1].limits.max_gpus == 16
    assert cluster.spec.accounting.database.internal.size == "2Gi"
    assert cluster.spec.scheduling.fair_share.decay_half_life == "7-0"
    h100 = manifests.node_sets_of(cluster)[0]
    assert h100.spec.gpus.resource_name == "nvidia.com/gpu"
    assert h100.spec.resources.cpus == 8 and h100.spec.resources.memory_mib == 32 * 1024


def test_defaults_fill_an_almost_empty_cluster():
    cluster = parse_object({"apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "tiny"}})
    assert cluster.spec.accounting.enabled and cluster.spec.accounting.database.internal is not None
    assert cluster.spec.login.replicas == 1 and cluster.spec.scheduling.backfill


def test_cpu_may_be_written_as_an_integer():
    node_set = parse_object(set_path(GPU_NODES, "spec.resources.cpu", 16))
    assert node_set.spec.resources.cpus == 16


BAD = [
    # (document, path, value, text that must appear in the error)
    (CLUSTER, "spec.scheduling.preemption", "sometimes", "spec.scheduling.preemption"),
    (CLUSTER, "spec.scheduling.fairShare.decayHalfLife", "a week", "spec.scheduling.fairShare.decayHalfLife"),
    (CLUSTER, "spec.partitions.0.maxTime", "1 day", "spec.partitions[0].maxTime"),
    (CLUSTER, "spec.partitions.1.default", True, "only one partition may be default"),
    (CLUSTER, "spec.partitions.0.nodeSets", [], "spec.partitions[0].nodeSets"),
    (CLUSTER, "spec.accounts.0.shares", 0, "spec.accounts[0].shares"),
    (CLUSTER, "spec.accounts.0.users", ["Alice Smith"], "spec.accounts[0].users[0]"),
    (CLUSTER, "spec.accounts.1.name", "vision", "accounts names must be unique"),
    (CLUSTER, "spec.login.replicas", -1, "spec.login.replicas"),
    (CLUSTER, "spec.accounting.database", {"internal": {}, "external": {"host": "db", "passwordSecretRef": {"name": "s"}}}, "exactly one"),
    (CLUSTER, "spec.accounting.database", {"external": {"host": "db"}}, "spec.accounting.database.external.passwordSecretRef"),
    (CLUSTER, "spec.accounting.enabled", False, "accounts need accounting.enabled"),
    (CLUSTER, "spec.controller.persistence.size", "lots", "spec.controller.persistence.size"),
    (CLUSTER, "spec.topology", {"plugin": "block", "nodeLabels": ["a", "b"]}, "exactly one label"),
    (CLUSTER, "spec.replicas", 3, "spec.replicas: unknown field"),
    (GPU_NODES, "spec.replicas", 65, "must not exceed maxReplicas"),
    (GPU_NODES, "spec.gpus.count", -1, "spec.gpus.count"),
    (GPU_NODES, "spec.resources.cpu", "1.5", "spec.resources.cpu"),
    (GPU_NODES, "spec.resources.memory", "100Mi", "too small"),
    (GPU_NODES, "spec.clusterName", DELETE, "spec.clusterName"),
    (GPU_NODES, "spec.features", ["has space"], "spec.features[0]"),
    (GPU_NODES, "spec.updateStrategy", {"type": "Sometimes"}, "spec.updateStrategy.type"),
]


@pytest.mark.parametrize("document,path,value,expected", BAD, ids=[f"{d['kind']}:{p}" for d, p, _, _ in BAD])
def test_bad_input_is_refused_with_the_field_named(document, path, value, expected):
    with pytest.raises(ManifestError) as error:
        parse_object(set_path(document, path, value), "input.yaml")
    assert expected in str(error.value)
    assert "input.yaml" in str(error.value)


def test_node_set_may_not_take_a_name_the_cluster_uses():
    with pytest.raises(ManifestError, match="taken by the cluster's own login objects"):
        parse_object(set_path(GPU_NODES, "metadata.name", "research-login"))


def test_unknown_kind_names_what_is_allowed():
    with pytest.raises(ManifestError, match="not one of"):
        parse_object({"apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmNode", "metadata": {"name": "x"}})
