"""Fixtures of the e2e tier (pytest -m e2e): the whole user story on real Kubernetes.

The cluster comes from testbed/cluster_providers.py, chosen by one option
(`--e2e-cluster` or $KUBESLURM_E2E_CLUSTER): the built-in local cluster (default; four
kubelet nodes, fake GPUs), a cluster of yours (kubeconfig), or kind through pytest-kind. A
local cluster that is already up with at least four nodes (`make demo`, `make
cluster-up`) is used and left running; otherwise the session starts one and always
stops it, also when a test fails.

The operator runs in-cluster, installed with its helm chart from the images of
images/ (built and cached by content), as a platform team installs it. It is
uninstalled at the end unless it was installed before the session.
"""

from __future__ import annotations

import contextlib

import pytest

from testbed import cluster_providers, deployment
from testbed.kubectl import Kube
from tests.conftest import output_shown

# Every node has the machine's 2 CPUs: a 1-CPU slurmd pod and the small system pods leave no
# room for a second slurmd pod, and the story peaks at four (h100-0, cpu-0..2).
NODES = 4


@pytest.fixture(scope="session")
def e2e_cluster(pytestconfig):
    """The cluster of testbed/cluster_providers.py that the option chose; a provider that
    cannot start fails the tier with its reason (never a skip)."""
    try:
        provider = cluster_providers.chosen_provider(pytestconfig.getoption("--e2e-cluster"))
        with contextlib.ExitStack() as stack:
            with output_shown(pytestconfig):  # a cold start builds for minutes
                handle = stack.enter_context(cluster_providers.provided_cluster(provider, nodes=NODES))
            yield handle
    except cluster_providers.ProviderError as error:
        pytest.fail(str(error))


@pytest.fixture(scope="session")
def kube(e2e_cluster):
    """(Kube, whether the cluster is the built-in local one)."""
    yield e2e_cluster.kube, e2e_cluster.provider == "local"


@pytest.fixture(scope="session")
def operator(kube, e2e_cluster, pytestconfig):
    """The operator in-cluster via `helm upgrade --install`; yields the images."""
    client = e2e_cluster.kube
    with output_shown(pytestconfig):
        images = deployment.build_images()
        e2e_cluster.load(images)
    installed_before = deployment.operator_release_exists(client.kubeconfig)
    deployment.install_operator(client.kubeconfig, images, local=e2e_cluster.loads_images)
    yield images
    if not installed_before:
        deployment.uninstall_operator(client.kubeconfig)
