"""Fixtures of the real-cluster tier (pytest -m cluster): the local Kubernetes
cluster of testbed/local_cluster -- control plane, kubelet + containerd, CNI bridge,
kube-proxy, CoreDNS, hostPath storage and the fake GPU plugin.

Needs root. The first run builds binaries and images (minutes); later runs start
the cluster in about half a minute. A cluster that is already up (`make
cluster-up`) is used as it is and left running; otherwise the session starts
one and always tears it down, also when a test fails.
"""

from __future__ import annotations

import os

import pytest

from testbed.local_cluster import running_local_cluster
from tests.conftest import fresh_namespace


@pytest.fixture(scope="session")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("the cluster tier needs root (network namespaces, mounts, cgroups)")
    with running_local_cluster() as lc:
        yield lc


@pytest.fixture
def namespace(cluster):
    with fresh_namespace(cluster.kubectl) as name:
        yield name
