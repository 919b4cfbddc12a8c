"""Fixtures of the real-Slurm tier (pytest -m slurm): real slurmctld, slurmd,
slurmdbd and MariaDB from the Debian trixie packages of the images, one network
namespace per host (testbed/native_slurm).

The first run builds the root filesystem with debootstrap (about 2 minutes,
progress on the terminal); later runs reuse it from
${KUBESLURM_CACHE:-~/.cache/kubeslurm}/rootfs/.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from tests.conftest import output_shown
from testbed import native_slurm


@pytest.fixture(scope="session")
def slurm_rootfs(pytestconfig):
    if os.geteuid() != 0:
        pytest.skip("real-Slurm tests need root: network/mount namespaces, overlayfs, debootstrap")
    native_slurm.cleanup_leftovers()
    with output_shown(pytestconfig):
        return native_slurm.build_rootfs()


@pytest.fixture(scope="session", autouse=True)
def _slurm_cleanup_at_end():
    # Whatever a test left running (a cluster it did not stop, an interrupted
    # start) is removed when the session ends, failed or not.
    yield
    native_slurm.stop_all()
    if os.geteuid() == 0:
        native_slurm.cleanup_leftovers()


@pytest.fixture
def native_slurm_cluster(slurm_rootfs, request):
    """Factory: native_slurm_cluster(configs=..., auth_key=..., nodes=...) starts a
    cluster that is stopped after the test; on failure the daemons' log tails are
    printed first."""
    clusters: list[native_slurm.NativeSlurmCluster] = []

    def make(**kw) -> native_slurm.NativeSlurmCluster:
        c = native_slurm.NativeSlurmCluster(slurm_rootfs, **kw)
        clusters.append(c)
        return c.start()

    yield make
    failed = getattr(request.node, "rep_call", None)
    for c in clusters:
        c.stop(show_logs=failed is not None and failed.failed)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    return rep


@contextlib.contextmanager
def stopped_after(cluster, request):
    """Stops a module's CLUSTER when the block ends; when one of the module's tests failed
    meanwhile, prints its daemons' log tails first."""
    failed_before = request.session.testsfailed
    try:
        yield cluster
    finally:
        cluster.stop(show_logs=request.session.testsfailed > failed_before)


@contextlib.contextmanager
def running_with_accounts(slurm_rootfs, request, documents: list[dict], name: str):
    """A module's cluster rendered from `documents` (a SlurmCluster and its NodeSets), started,
    its accounts and QOS created as the operator creates them; (model, node sets, cluster,
    SlurmControl) while the block runs, stopped after it (stopped_after)."""
    from kubeslurm.render.config.accounting_commands import accounting_commands
    from testbed.native_slurm.rendered import load, native_cluster, slurm_control

    model, node_sets = load(documents)
    cluster = native_cluster(slurm_rootfs, model, node_sets, name=name)
    with stopped_after(cluster, request):
        cluster.start()
        control = slurm_control(cluster)
        control.sacctmgr(accounting_commands(model))
        yield model, node_sets, cluster, control
