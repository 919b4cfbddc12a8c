"""Which cluster the e2e tier runs on (testbed/cluster_providers.py): one option, and what the
kind provider asks kind and the cluster for."""

import pytest
import yaml

from testbed import cluster_providers
from testbed.cluster_providers import ProviderError, chosen_provider


@pytest.mark.parametrize("option, environ, want", [
    (None, {}, "local"),
    (None, {"KUBESLURM_E2E_KUBECONFIG": "/k"}, "kubeconfig"),
    (None, {"KUBESLURM_E2E_CLUSTER": "kind", "KUBESLURM_E2E_KUBECONFIG": "/k"}, "kind"),
    ("local", {"KUBESLURM_E2E_CLUSTER": "kind"}, "local"),
    # A KUBECONFIG of the user's shell never moves the tier off the local cluster by itself.
    (None, {"KUBECONFIG": "/home/me/.kube/config"}, "local"),
])
def test_the_option_then_the_environment_choose(option, environ, want):
    assert chosen_provider(option, environ) == want


def test_an_unknown_provider_is_refused_with_the_choices():
    with pytest.raises(ProviderError, match="choose one of local, kubeconfig, kind"):
        chosen_provider(None, {"KUBESLURM_E2E_CLUSTER": "minikube"})


def test_the_kubeconfig_provider_needs_a_kubeconfig():
    with pytest.raises(ProviderError, match="needs KUBESLURM_E2E_KUBECONFIG"):
        with cluster_providers.provided_cluster("kubeconfig", nodes=4, environ={}):
            pass


def test_kind_gets_one_control_plane_and_the_workers_the_fake_gpus_select():
    config = yaml.safe_load(cluster_providers.kind_config(4))
    assert [n["role"] for n in config["nodes"]] == ["control-plane"] + ["worker"] * 4
    [daemonset] = [d for d in cluster_providers.fake_gpu_daemonset("img:1") if d["kind"] == "DaemonSet"]
    selector = daemonset["spec"]["template"]["spec"]["nodeSelector"]
    assert all(n.get("labels", {}).items() >= selector.items() for n in config["nodes"][1:])
    assert not config["nodes"][0].get("labels")
