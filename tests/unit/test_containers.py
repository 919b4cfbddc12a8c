"""Jobs in containers (spec.slurm.containers): oci.conf and what the slurmd pods are granted."""

import pytest

from kubeslurm.api import parse_object
from kubeslurm.render.config.files import render_config_files
from kubeslurm.render.config.oci_conf import render_oci_conf

from .manifests import contract_documents, set_path
from .test_objects_slurmd import container, template_of

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
NODE_SETS = [parse_object(GPU_NODES), parse_object(CPU_NODES)]
CRUN = "crun --rootless=true --cgroup-manager=disabled --root=/tmp/kubeslurm-crun-%U"


def _conf_lines(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_no_oci_conf_without_containers():
    cluster = parse_object(CLUSTER)
    assert render_oci_conf(cluster) is None
    assert "oci.conf" not in render_config_files(cluster, NODE_SETS)


def test_oci_conf_runs_crun_rootless_as_the_job_s_user():
    cluster = parse_object(set_path(CLUSTER, "spec.slurm.containers", True))
    text = render_config_files(cluster, NODE_SETS)["oci.conf"]
    assert _conf_lines(text) == {
        "EnvExclude": '"^(SLURM_CONF|SLURM_CONF_SERVER)="',
        "RunTimeEnvExclude": '"^(SLURM_CONF|SLURM_CONF_SERVER)="',
        "RunTimeQuery": f'"{CRUN} state %n.%u.%j.%s.%t"',
        "RunTimeKill": f'"{CRUN} kill -a %n.%u.%j.%s.%t"',
        "RunTimeDelete": f'"{CRUN} delete --force %n.%u.%j.%s.%t"',
        "RunTimeRun": '"/usr/libexec/kubeslurm/oci-run %b %n.%u.%j.%s.%t"',
    }


@pytest.mark.parametrize(
    "containers,constrain,expected",
    [
        # the default: RuntimeDefault seccomp from the pod, no privilege
        (False, False, {"runAsUser": 0}),
        # user namespaces for rootless crun: no seccomp filter, still no capability or privilege
        (True, False, {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}}),
        # cgroup confinement makes the container privileged, which has no seccomp filter anyway
        (True, True, {"runAsUser": 0, "privileged": True}),
        (False, True, {"runAsUser": 0, "privileged": True}),
    ],
)
def test_what_slurmd_pods_are_granted(containers, constrain, expected):
    cluster = set_path(set_path(CLUSTER, "spec.slurm.containers", containers), "spec.slurm.constrainWithCgroups", constrain)
    assert container(template_of(GPU_NODES, cluster))["securityContext"] == expected
