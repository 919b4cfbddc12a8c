"""The kind provider's fake GPU DaemonSet (testbed/cluster_providers.py) as a real API server
takes it: valid, admitted, and selecting the nodes kind_config labels. (kind itself needs
Docker, which this machine has not; the rest of its path is the local provider's.)"""

import re
import subprocess

import pytest
import yaml

from testbed import cluster_providers
from testbed.kind import BUILD_SCRIPT, build_kind

pytestmark = pytest.mark.k8s


def test_the_fake_gpu_daemonset_is_accepted_by_the_api_server(control_plane):
    manifests = yaml.safe_dump_all(cluster_providers.fake_gpu_daemonset("localhost/kubeslurm/fake-gpu:0.1.0"))
    try:
        control_plane.kubectl("apply", "-f", "-", input=manifests)
        daemonset = control_plane.kubectl("get", "daemonset", "fake-gpu", "-n", cluster_providers.FAKE_GPU_NAMESPACE,
                                          "-o", "json")
        created = yaml.safe_load(daemonset.stdout)
        assert created["spec"]["template"]["spec"]["containers"][0]["securityContext"] == {"privileged": True}
        assert created["spec"]["template"]["spec"]["nodeSelector"] == {"kubeslurm.io/fake-gpus": "true"}
    finally:
        control_plane.kubectl("delete", "namespace", cluster_providers.FAKE_GPU_NAMESPACE, "--wait=false", check=False)


def test_the_pinned_kind_builds_from_the_go_module_proxy_and_reports_its_version():
    pinned = re.search(r"sigs\.k8s\.io/kind (v[0-9.]+)", (BUILD_SCRIPT.parent / "go.mod").read_text()).group(1)
    version = subprocess.run([str(build_kind()), "version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith(f"kind {pinned} "), version
