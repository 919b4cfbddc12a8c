"""Fixtures shared by the tiers that need a real API server (tests/k8s, tests/helm), and by
the tiers that run on a whole Kubernetes cluster with the operator in it (tests/e2e,
tests/faults).

They live here, not in each tier's conftest.py, so that one pytest session running two tiers
starts one control plane, and one cluster and operator: a session fixture defined in two
conftest files would be two fixtures (or, imported from the other tier's conftest, one that
cannot find the fixtures it depends on), and the second start would sweep the first one's
daemons (cleanup_leftovers).

`control_plane` is one etcd + kube-apiserver + kube-controller-manager per test session,
upstream binaries at the version pinned in testbed/kubernetes/go.mod. The first run builds the
binaries from the Go module proxy (many minutes on 2 cores, progress on the terminal); later
runs reuse them from ${KUBESLURM_CACHE:-~/.cache/kubeslurm}/kubernetes/<version>/bin.
KUBESLURM_K8S_KEEP_WORKDIR=1 keeps the certificates, logs and audit log of the run.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid

import pytest


def pytest_addoption(parser):
    # Here, not in a tier's conftest.py: pytest reads options only from the conftest files it
    # loads first, and a run of `pytest tests` does not load tests/e2e's first.
    from testbed import cluster_providers

    parser.addoption("--e2e-cluster", choices=cluster_providers.PROVIDERS, default=None,
                     help="where the e2e tier runs: local (default), kubeconfig "
                          f"(${cluster_providers.KUBECONFIG_ENV}) or kind (pytest-kind, Docker); "
                          f"also ${cluster_providers.PROVIDER_ENV}")


@contextlib.contextmanager
def output_shown(config: pytest.Config):
    # A cold build runs for minutes: show its progress instead of swallowing it.
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        yield
        return
    with capman.global_and_fixture_disabled():
        yield


@pytest.fixture(scope="session")
def k8s_bin_dir(pytestconfig):
    # Imported here so that the unit tier does not depend on the control plane module.
    from testbed.control_plane import build_kubernetes_binaries

    with output_shown(pytestconfig):
        return build_kubernetes_binaries()


@pytest.fixture(scope="session")
def control_plane(k8s_bin_dir):
    from testbed.control_plane import STATE_DIR, ControlPlane, cleanup_leftovers

    cleanup_leftovers()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="run-", dir=STATE_DIR)
    # Reads are audited too: tests/k8s/test_reconcile_reads.py counts the operator's.
    cp = ControlPlane(workdir, k8s_bin_dir, audit_reads=True)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@contextlib.contextmanager
def fresh_namespace(kubectl):
    """A fresh namespace for one test, deleted afterwards (without waiting); kubectl is the
    cluster's (the control plane's or the local cluster's)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(control_plane):
    with fresh_namespace(control_plane.kubectl) as name:
        yield name


# -- the e2e and fault tiers: a whole cluster and the operator in it ------------------------
#
# The cluster comes from testbed/cluster_providers.py, chosen by one option
# (`--e2e-cluster` or $KUBESLURM_E2E_CLUSTER): the built-in local cluster (default; four
# kubelet nodes, fake GPUs), a cluster of yours (kubeconfig), or kind through pytest-kind. A
# local cluster that is already up with at least four nodes (`make demo`, `make
# cluster-up`) is used and left running; otherwise the session starts one and always
# stops it, also when a test fails.
#
# The operator runs in-cluster, installed with its helm chart from the images of
# images/ (built and cached by content), as a platform team installs it. It is
# uninstalled at the end unless it was installed before the session.

# Every node has the machine's 2 CPUs: a 1-CPU slurmd pod and the small system pods leave no
# room for a second slurmd pod, and the story peaks at four (h100-0, cpu-0..2).
NODES = 4


@pytest.fixture(scope="session")
def e2e_cluster(pytestconfig):
    """The cluster of testbed/cluster_providers.py that the option chose; a provider that
    cannot start fails the tier with its reason (never a skip)."""
    from testbed import cluster_providers

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
    from testbed import deployment

    client = e2e_cluster.kube
    with output_shown(pytestconfig):
        images = deployment.build_images()
        e2e_cluster.load(images)
    deployment.delete_test_namespaces(client)  # what an interrupted session left running
    installed_before = deployment.operator_release_exists(client.kubeconfig)
    local_values = deployment.local_cluster_operator_values() if e2e_cluster.provider == "local" else []
    deployment.install_operator(client.kubeconfig, images, local=e2e_cluster.loads_images, extra_values=local_values)
    yield images
    if not installed_before:
        deployment.uninstall_operator(client.kubeconfig)
