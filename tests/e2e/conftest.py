"""Fixtures of the e2e tier (pytest -m e2e): the whole user story on real Kubernetes.

The cluster is the local one of testbed/local_cluster (four kubelet nodes, fake GPUs) unless
KUBESLURM_E2E_KUBECONFIG names another cluster whose nodes can run the images. A
local cluster that is already up with at least four nodes (`make demo`, `make
cluster-up`) is used and left running; otherwise the session starts one and always
stops it, also when a test fails.

The operator runs in-cluster, installed with its helm chart from the images of
images/ (built and cached by content), as a platform team installs it. It is
uninstalled at the end unless it was installed before the session.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from testbed import deployment
from testbed.kubectl import Kube
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
    from testbed.local_cluster import ClusterError, running_local_cluster

    with contextlib.ExitStack() as stack:
        try:
            with output_shown(pytestconfig):  # a cold start builds for minutes
                cluster = stack.enter_context(running_local_cluster(NODES, min_nodes=NODES))
        except ClusterError as error:
            pytest.fail(str(error))
        yield Kube(str(cluster.kubeconfig_path)), True


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
