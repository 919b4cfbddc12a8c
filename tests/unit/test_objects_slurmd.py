"""The slurmd StatefulSet of a NodeSet: registration, resources, placement, podTemplate merge, budget."""

import os
import socket
import subprocess
import sys
import time

import pytest

from kubeslurm.api import ManifestError
from kubeslurm.render.cluster_objects import node_set_objects
from kubeslurm.render.k8s import labels
from kubeslurm.render.k8s.naming import SLURMCTLD_PORT
from kubeslurm.render.k8s.pod_template_merge import merge_pod_template
from kubeslurm.render.slurm_pod import SLURM_RUN
from kubeslurm.render.conf_server import CONTROLLER_WAIT_SECONDS
from kubeslurm.render.slurmd.statefulset import RESTART_MARKER, SLURMD_START

from .late_listener import listening_after
from .manifests import contract_documents, load_with_uids, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()


def objects_of(node_set_doc=GPU_NODES, cluster_doc=CLUSTER, **kwargs) -> dict[str, dict]:
    cluster, [node_set] = load_with_uids(cluster_doc, node_set_doc)
    return {obj["kind"]: obj for obj in node_set_objects(cluster, node_set, **kwargs)}


def template_of(node_set_doc=GPU_NODES, cluster_doc=CLUSTER) -> dict:
    return objects_of(node_set_doc, cluster_doc)["StatefulSet"]["spec"]["template"]


def container(template: dict, name: str = "slurmd") -> dict:
    return next(c for c in template["spec"]["containers"] if c["name"] == name)


@pytest.mark.parametrize(
    "node_set_doc,cluster_doc,conf_server,registration",
    [
        (GPU_NODES, CLUSTER, "research-slurmctld-0:6817",
         "CPUs=8 RealMemory=31129 Features=h100,nvlink Gres=gpu:h100:8"),
        (CPU_NODES, CLUSTER, "research-slurmctld-0:6817", "CPUs=4 RealMemory=7782 Features=cpu"),
        (CPU_NODES, set_path(CLUSTER, "spec.controller.backup", True),
         "research-slurmctld-0:6817,research-slurmctld-1:6817",
         "CPUs=4 RealMemory=7782 Features=cpu"),
    ],
)
def test_slurmd_registers_as_the_pod_with_every_controller(node_set_doc, cluster_doc, conf_server, registration):
    slurmd = container(template_of(node_set_doc, cluster_doc))
    assert slurmd["command"] == ["/bin/sh", "-c", SLURMD_START, "slurmd"]
    assert slurmd["args"] == ["-D", "-Z", "-N", "$(POD_NAME)", "--conf-server", conf_server, "--conf", registration]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in slurmd["env"]
    assert slurmd["securityContext"]["runAsUser"] == 0


STAND_IN = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
if [ "$1 $2 $3" = "--oneliner show node" ]; then echo "$SHOWN"; fi
"""
# sackd: serves the sack socket in the run directory of the config it is given, until killed.
SACKD_STAND_IN = f"""#!{sys.executable}
import os, signal, socket, sys
conf = sys.argv[sys.argv.index("-f") + 1]
with open(os.environ["CALLS"], "a") as calls:
    calls.write(f"sackd {{' '.join(sys.argv[1:])}} key={{os.environ.get('SLURM_SACK_KEY')}}\\n")
listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join(os.path.dirname(os.path.dirname(conf)), "sack.socket"))
listener.listen(1)
signal.pause()
"""


@pytest.fixture
def controller():
    """A TCP listener standing in for slurmctld: its address, as --conf-server names it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def start_slurmd(tmp_path, conf_server: str, *, shown: str = "", script: str = SLURMD_START) -> list[str]:
    """SLURMD_START run by sh as the container runs it, once, with stand-in scontrol and slurmd
    on PATH that record their argv; the marker in tmp_path. Returns the calls, in order."""
    bin_dir, calls, run = tmp_path / "bin", tmp_path / "calls", tmp_path / "run"
    bin_dir.mkdir(exist_ok=True)
    (run / "conf").mkdir(parents=True, exist_ok=True)
    for name, text in (("scontrol", STAND_IN), ("slurmd", STAND_IN), ("sackd", SACKD_STAND_IN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    assert RESTART_MARKER.startswith(f"{SLURM_RUN}/")
    script = script.replace(SLURM_RUN, str(run))  # the pod's /run/slurm emptyDir
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "SHOWN": shown,
           "POD_NAME": "cpu-0"}
    subprocess.run(["/bin/sh", "-c", script, "slurmd", "-D", "-N", "cpu-0", "--conf-server", conf_server],
                   env=env, check=True, timeout=60)
    return calls.read_text().splitlines()


def test_slurmd_rerun_in_its_pod_marks_its_node_down_before_it_registers(tmp_path, controller):
    """The first start only runs slurmd; a rerun of the container in the same pod (the marker
    in the pod's /run/slurm is there) marks the node DOWN first, naming the restart, so Slurm
    requeues the jobs whose steps died with the old slurmd; then slurmd, as PID 1 (exec)."""
    slurmd = f"slurmd -D -N cpu-0 --conf-server {controller}"
    assert start_slurmd(tmp_path, controller) == [slurmd]
    calls = start_slurmd(tmp_path, controller)
    # slurmd's sack socket died with it: sackd serves credentials for scontrol meanwhile
    assert calls[:3] == [slurmd, f"sackd -D -f {tmp_path}/run/conf/slurm.conf key=/etc/slurm/slurm.key",
                         "scontrol --oneliner show node cpu-0"]
    assert calls[3] == ("scontrol update NodeName=cpu-0 State=DOWN Reason=kubeslurm: slurmd pod lost: "
                        "slurmd restarted in pod cpu-0, its job steps died with it")
    assert calls[4:] == [slurmd]
    assert not (tmp_path / "run" / "sack.socket").exists() or not _sackd_running(), "sackd stopped before slurmd"


def _sackd_running() -> bool:
    return subprocess.run(["pgrep", "-f", "bin/sackd -D -f"], capture_output=True).returncode == 0


def test_slurmd_rerun_on_a_drained_node_keeps_the_drain_reason(tmp_path, controller):
    start_slurmd(tmp_path, controller)
    shown = "NodeName=cpu-0 State=IDLE+DRAIN ThreadsPerCore=1 Reason=maintenance by admin [root@2026-12-04T10:00:00]"
    calls = start_slurmd(tmp_path, controller, shown=shown)
    assert "scontrol update NodeName=cpu-0 State=DOWN Reason=maintenance by admin" in calls


def test_slurmd_starts_once_slurmctld_listens_and_not_before(tmp_path):
    """slurmctld not listening yet: the container waits (a first configless fetch would fail and
    slurmd retry only 10 s later); slurmd starts within about a second of the listener."""
    with listening_after(2) as (port, opened):
        address = f"127.0.0.1:{port}"
        calls = start_slurmd(tmp_path, f"127.0.0.1:1,{address}")  # a backup that never answers, then the primary
        started = time.monotonic()
    assert calls == [f"slurmd -D -N cpu-0 --conf-server 127.0.0.1:1,{address}"]
    assert 0 <= started - opened[0] < 4, started - opened[0]


def test_a_conf_server_without_a_port_is_waited_for_on_slurmctlds_port(tmp_path, monkeypatch):
    """--conf-server host[:port]: a bare host name means slurmctld's port, 6817."""
    script = SLURMD_START.replace(f"port={SLURMCTLD_PORT}", "port=$TEST_PORT")
    assert script != SLURMD_START
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        monkeypatch.setenv("TEST_PORT", str(listener.getsockname()[1]))
        t0 = time.monotonic()
        assert start_slurmd(tmp_path, "127.0.0.1", script=script) == ["slurmd -D -N cpu-0 --conf-server 127.0.0.1"]
    assert time.monotonic() - t0 < 5


def test_slurmd_starts_anyway_after_the_wait_for_slurmctld(tmp_path):
    """Nobody listens: after CONTROLLER_WAIT_SECONDS (2 here) slurmd starts all the same, to retry on its own."""
    script = SLURMD_START.replace(f"-ge {CONTROLLER_WAIT_SECONDS * 5}", "-ge 10")  # tries of 0.2 s
    assert script != SLURMD_START
    t0 = time.monotonic()
    assert start_slurmd(tmp_path, "127.0.0.1:1", script=script) == ["slurmd -D -N cpu-0 --conf-server 127.0.0.1:1"]
    assert 2 <= time.monotonic() - t0 < 10


def test_statefulset_names_pods_after_the_node_set():
    statefulset = objects_of()["StatefulSet"]
    assert statefulset["metadata"]["name"] == "h100" and statefulset["spec"]["serviceName"] == "h100"
    assert objects_of()["Service"]["metadata"]["name"] == "h100"
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
    assert statefulset["spec"]["replicas"] == 2


def test_the_service_selects_the_node_sets_pods_by_one_label():
    """One label (labels.node_set_service_selector): the endpoint controllers match it against
    every pod of the namespace at each sync; it is one of the StatefulSet's own selector labels,
    so it selects that NodeSet's pods and no others."""
    objects = objects_of()
    selector = objects["Service"]["spec"]["selector"]
    assert selector == {labels.NODE_SET: "h100"}
    assert selector.items() <= objects["StatefulSet"]["spec"]["selector"]["matchLabels"].items()
    assert selector.items() <= objects["StatefulSet"]["spec"]["template"]["metadata"]["labels"].items()


def test_replicas_may_be_held_while_draining():
    assert objects_of(replicas=5)["StatefulSet"]["spec"]["replicas"] == 5


@pytest.mark.parametrize(
    "gpus,expected",
    [
        (None, {"cpu": "8", "memory": "32Gi"}),
        ({"count": 0}, {"cpu": "8", "memory": "32Gi"}),
        ({"count": 8, "type": "h100"}, {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}),
        ({"count": 2, "resourceName": "amd.com/gpu"}, {"cpu": "8", "memory": "32Gi", "amd.com/gpu": "2"}),
    ],
)
def test_resources_are_guaranteed_and_gpus_use_the_configured_resource(gpus, expected):
    slurmd = container(template_of(set_path(GPU_NODES, "spec.gpus", gpus)))
    assert slurmd["resources"] == {"requests": expected, "limits": expected}


@pytest.mark.parametrize(
    "field,value",
    [
        ("nodeSelector", {"nvidia.com/gpu.product": "H100"}),
        ("tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}),
    ],
)
def test_placement_passes_through(field, value):
    assert template_of(set_path(GPU_NODES, f"spec.{field}", value))["spec"][field] == value


def test_no_placement_fields_when_unset():
    assert not {"nodeSelector", "tolerations", "affinity"} & set(template_of()["spec"])


@pytest.mark.parametrize("strategy,expected", [(None, "OnDelete"), ({"type": "RollingUpdate"}, "RollingUpdate")])
def test_update_strategy(strategy, expected):
    doc = GPU_NODES if strategy is None else set_path(GPU_NODES, "spec.updateStrategy", strategy)
    assert objects_of(doc)["StatefulSet"]["spec"]["updateStrategy"] == {"type": expected}


@pytest.mark.parametrize("constrain,privileged", [(False, None), (True, True)])
def test_cgroup_confinement_makes_slurmd_privileged(constrain, privileged):
    cluster = set_path(CLUSTER, "spec.slurm.constrainWithCgroups", constrain)
    assert container(template_of(GPU_NODES, cluster))["securityContext"].get("privileged") == privileged


def test_slurmd_pods_get_the_key_but_no_config_and_no_config_hash():
    template = template_of()
    assert set(template["metadata"]["annotations"]) == {"kubectl.kubernetes.io/default-container"}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["slurm-key"]["secret"]["secretName"] == "research-auth-key"
    # no Slurm config (configless); the one ConfigMap is the users table, read by install-config
    assert [v["configMap"]["name"] for v in volumes.values() if "configMap" in v] == ["research-unix-users"]
    mounts = {m["mountPath"] for m in container(template)["volumeMounts"]}
    assert mounts == {"/etc/slurm", "/var/spool/slurmd", "/run/slurm", "/dev/shm", "/etc/passwd", "/etc/group", "/home"}
    probe = container(template)["readinessProbe"]["exec"]["command"]
    assert probe == ["scontrol", "show", "slurmd"]
    assert "livenessProbe" not in container(template)


def test_running_jobs_budget_protects_only_busy_pods():
    budget = objects_of()["PodDisruptionBudget"]
    assert budget["metadata"]["name"] == "h100-running-jobs"
    assert budget["spec"]["maxUnavailable"] == 0
    assert budget["spec"]["selector"]["matchLabels"] == {
        labels.NAME: "slurm", labels.INSTANCE: "research", labels.COMPONENT: "slurmd",
        labels.NODE_SET: "h100", labels.RUNNING_JOBS: "true",
    }
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_node_set_of_another_cluster_is_refused():
    cluster, [node_set] = load_with_uids(CLUSTER, set_path(GPU_NODES, "spec.clusterName", "other"))
    with pytest.raises(ValueError, match="belongs to cluster 'other'"):
        node_set_objects(cluster, node_set)


# spec.podTemplate merged over the operator's template (what it may not change: test_pod_template_refusals)
SIDECAR = {"name": "metrics", "image": "example/metrics:1"}


@pytest.mark.parametrize(
    "pod_template,check",
    [
        ({"spec": {"containers": [{"name": "slurmd", "image": "example/slurm-with-cuda:1"}]}},
         lambda t: container(t)["image"] == "example/slurm-with-cuda:1" and container(t)["args"][0] == "-D"),
        ({"metadata": {"labels": {"team": "vision"}, "annotations": {"example.com/a": "b"}}},
         lambda t: t["metadata"]["labels"]["team"] == "vision"
         and t["metadata"]["labels"][labels.NODE_SET] == "h100"
         and t["metadata"]["annotations"]["example.com/a"] == "b"),
        # kubeslurm.io/ labels are refused by the model (test_hostile_manifests); the others the operator overrides
        ({"metadata": {"labels": {labels.INSTANCE: "hijacked"}}},
         lambda t: t["metadata"]["labels"][labels.INSTANCE] == "research"),
        ({"spec": {"volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}],
                   "containers": [{"name": "slurmd", "volumeMounts": [{"name": "datasets", "mountPath": "/datasets"}]}]}},
         lambda t: t["spec"]["volumes"][-1]["name"] == "datasets"
         and len(t["spec"]["volumes"]) == 9
         and {"name": "datasets", "mountPath": "/datasets"} in container(t)["volumeMounts"]
         and len(container(t)["volumeMounts"]) == 8),
        ({"spec": {"containers": [{"name": "slurmd", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}]}},
         lambda t: [e["name"] for e in container(t)["env"]] == ["POD_NAME", "NCCL_DEBUG"]),
        ({"spec": {"priorityClassName": "hpc", "nodeSelector": {"example.com/pool": "gpu"},
                   "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]}},
         lambda t: t["spec"]["priorityClassName"] == "hpc" and t["spec"]["nodeSelector"] == {"example.com/pool": "gpu"}
         and t["spec"]["topologySpreadConstraints"][0]["maxSkew"] == 1 and "hostNetwork" not in t["spec"]),
        ({"spec": {"containers": [{"name": "slurmd", "resources": {"limits": {"ephemeral-storage": "10Gi"}}}]}},
         lambda t: container(t)["resources"]["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8", "ephemeral-storage": "10Gi"}
         and container(t)["resources"]["requests"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}),
    ],
    ids=["image-override", "labels-merge", "selector-labels-win", "volume", "env-merge", "spec-field", "extra-resource"],
)
def test_pod_template_merges_over_ours(pod_template, check):
    assert check(template_of(set_path(GPU_NODES, "spec.podTemplate", pod_template)))


# What podTemplate may not do: each refused by the model, naming the field and what is allowed.
REFUSED_POD_TEMPLATES = [
    ({"spec": {"containers": [SIDECAR]}}, "spec.podTemplate.spec.containers[0].name", "only the container named slurmd"),
    ({"spec": {"hostNetwork": True}}, "spec.podTemplate.spec.hostNetwork", "not allowed in a podTemplate"),
    ({"spec": {"containers": [{"name": "slurmd", "readinessProbe": None}]}},
     "spec.podTemplate.spec.containers[0].readinessProbe", "not allowed in a podTemplate"),
    ({"spec": {"containers": [{"name": "slurmd", "image": None}]}},
     "spec.podTemplate.spec.containers[0].image", "null is not allowed"),
    ({"metadata": "oops"}, "spec.podTemplate.metadata", "valid dictionary"),
]


@pytest.mark.parametrize("pod_template,field,message", REFUSED_POD_TEMPLATES, ids=["sidecar", "host-network", "probe", "null", "malformed"])
def test_pod_template_refusals(pod_template, field, message):
    with pytest.raises(ManifestError) as error:
        load_with_uids(CLUSTER, set_path(GPU_NODES, "spec.podTemplate", pod_template))
    assert f"{field}: " in str(error.value) and message in str(error.value)
    assert "may set only metadata.labels" in str(error.value) or "hostNetwork" not in field


@pytest.mark.parametrize(
    "base,overlay,expected",
    [
        ({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}, {"a": {"b": 1, "c": 3}}),
        ({"args": ["-D"]}, {"args": ["-v"]}, {"args": ["-v"]}),
        ({"containers": [{"name": "a", "x": 1}]}, {"containers": [{"name": "a", "y": 2}, {"name": "b"}]},
         {"containers": [{"name": "a", "x": 1, "y": 2}, {"name": "b"}]}),
        ({"ports": [{"containerPort": 1, "name": "p"}]}, {"ports": [{"containerPort": 1, "hostPort": 1}]},
         {"ports": [{"containerPort": 1, "name": "p", "hostPort": 1}]}),
        ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
        ({"a": 1}, None, {"a": 1}),
    ],
)
def test_merge_rules(base, overlay, expected):
    before = repr(base)
    assert merge_pod_template(base, overlay) == expected
    assert repr(base) == before  # the operator's template is never changed in place


@pytest.mark.parametrize(
    "check,volume",
    [
        ({}, None),
        ({"siteScript": {"configMap": "gpu-burn"}},
         {"name": "gpu-burn", "items": [{"key": "check", "path": "site-check"}], "defaultMode": 0o555}),
        ({"siteScript": {"configMap": "gpu-burn", "key": "burn.sh"}},
         {"name": "gpu-burn", "items": [{"key": "burn.sh", "path": "site-check"}], "defaultMode": 0o555}),
        # A check that is off runs no site script either.
        ({"enabled": False, "siteScript": {"configMap": "gpu-burn"}}, None),
    ],
)
def test_the_site_health_check_is_mounted_where_the_image_check_runs_it(check, volume):
    template = template_of(cluster_doc=set_path(CLUSTER, "spec.nodeHealth", {"check": check}))
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    mounts = {m["name"]: m for m in container(template)["volumeMounts"]}
    if volume is None:
        assert "health-site-check" not in volumes and "health-site-check" not in mounts
    else:
        assert volumes["health-site-check"]["configMap"] == volume
        assert mounts["health-site-check"] == {"name": "health-site-check", "mountPath": "/etc/kubeslurm-health", "readOnly": True}
