"""Fixtures of the real-cluster tier (pytest -m cluster): the local Kubernetes
cluster of e2e/cluster/local_cluster.py -- control plane, kubelet + containerd,
CNI bridge, kube-proxy, CoreDNS, hostPath storage and the fake GPU plugin.

Needs root. The first run builds binaries and images (minutes); later runs start
the cluster in about half a minute. A cluster that is already up (`make
cluster-up`) is used as it is and left running; otherwise the session starts
one and always tears it down, also when a test fails.
"""

from __future__ import annotations

import os
import uuid

import pytest

from e2e.cluster.local_cluster import LocalCluster


@pytest.fixture(scope="session")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("the cluster tier needs root (network namespaces, mounts, cgroups)")
    lc = LocalCluster()
    if lc.is_healthy():
        yield lc
        return
    try:
        lc.up()
        yield lc
    finally:
        lc.down()


@pytest.fixture
def namespace(cluster):
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
