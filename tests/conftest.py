"""Fixtures shared by the tiers that need a real API server (tests/k8s, tests/helm).

They live here, not in tests/k8s/conftest.py, so that one pytest session running both
tiers starts one control plane: a session fixture defined in two conftest files would be two
fixtures, and the second start would sweep the first one's daemons (cleanup_leftovers).

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
    # Here, not in tests/e2e/conftest.py: pytest reads options only from the conftest files it
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
