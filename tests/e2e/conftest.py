"""Fixtures of the e2e tier (pytest -m e2e): the whole user story on real Kubernetes.

The cluster is the local one of e2e/cluster (four kubelet nodes, fake GPUs) unless
KUBESLURM_E2E_KUBECONFIG names another cluster whose nodes can run the images. A
local cluster that is already up with at least four nodes (`make demo`, `make
cluster-up`) is used and left running; otherwise the session starts one and always
stops it, also when a test fails.

The operator runs in-cluster, installed with its helm chart from the images of
images/ (built and cached by content), as a platform team installs it. It is
uninstalled at the end unless it was installed before the session.
"""

from __future__ import annotations

import os

import pytest

from e2e import deployment
from e2e.deployment import Kube
from tests.conftest import output_shown

# Every node has the machine's 2 CPUs: a 1-CPU slurmd pod and the small system pods leave no
# room for a second slurmd pod, and the story peaks at four (h100-0, cpu-0..2).
NODES = 4


@pytest.fixture(scope="session")
def kube(pytestconfig):
    user = os.environ.get("KUBESLURM_E2E_KUBECONFIG")
    if user:
        yield Kube(user), False
        return
    if os.geteuid() != 0:
        pytest.fail("the e2e tier needs root for the local cluster (or KUBESLURM_E2E_KUBECONFIG)")
    from e2e.cluster.local_cluster import LocalCluster

    cluster = LocalCluster(nodes=NODES)
    if cluster.is_healthy():
        running = len(Kube(str(cluster.kubeconfig_path)).get("nodes")["items"])
        if running < NODES:
            pytest.fail(f"a local cluster with {running} node(s) is running; the e2e story needs {NODES} "
                        f"(scale-up and node loss): `make cluster-down` (or `make demo-down`) first")
        yield Kube(str(cluster.kubeconfig_path)), True
        return
    try:
        with output_shown(pytestconfig):
            cluster.up()
        yield Kube(str(cluster.kubeconfig_path)), True
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def operator(kube, pytestconfig):
    """The operator in-cluster via `helm upgrade --install`; yields the images."""
    client, local = kube
    with output_shown(pytestconfig):
        images = deployment.build_images()
        if local:
            deployment.load_into_local_cluster(images)
    installed_before = deployment.operator_release_exists(client.kubeconfig)
    deployment.install_operator(client.kubeconfig, images, local=local)
    yield images
    if not installed_before:
        deployment.uninstall_operator(client.kubeconfig)
