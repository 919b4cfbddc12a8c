"""The local cluster does what a real one does: nodes, pods from locally built
images, GPUs pinned to pods, Service DNS, PVCs, StatefulSet identity."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.local_cluster import DEFAULT_GPUS, DNS_IP, system_images as images
from testbed.waiting import wait_for


REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cluster

BUSYBOX = images.BUSYBOX_IMAGE
# sh as PID 1 ignores SIGTERM: trap it so deletions do not wait out the grace period.
SLEEP = "trap 'exit 0' TERM; sleep 3600 & wait"


def apply(cluster, namespace: str, manifest: dict | list) -> None:
    items = manifest if isinstance(manifest, list) else [manifest]
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def pod(name: str, command: str, **spec) -> dict:
    container = {"name": "main", "image": BUSYBOX, "command": ["sh", "-c", command]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container], **spec},
    }


def wait_pod(cluster, namespace: str, name: str, phase: str = "Running", timeout: int = 90) -> None:
    if phase == "Running":
        args = ["--for=condition=Ready"]
    else:
        args = [f"--for=jsonpath={{.status.phase}}={phase}"]
    result = cluster.kubectl("-n", namespace, "wait", f"pod/{name}", *args, f"--timeout={timeout}s", check=False,
                             timeout=timeout + 30)
    if result.returncode != 0:
        describe = cluster.kubectl("-n", namespace, "describe", "pod", name, check=False).stdout
        pytest.fail(f"pod {name} did not reach {phase}: {result.stderr}\n{describe[-3000:]}")


def exec_(cluster, namespace: str, name: str, command: str) -> str:
    return cluster.kubectl("-n", namespace, "exec", name, "--", "sh", "-c", command).stdout


def test_node_is_ready_with_fake_gpus(cluster):
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert nodes, "no node registered"
    for node in nodes:
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True", conditions
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == "v1.30.14"
        assert info["containerRuntimeVersion"].startswith("containerd://1.6")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(DEFAULT_GPUS)


def test_pod_from_locally_imported_image_runs(cluster, namespace):
    apply(cluster, namespace, pod("hello", "echo hello from $(hostname); cat /proc/1/cgroup | grep -c kubepods"))
    wait_pod(cluster, namespace, "hello", "Succeeded")
    out = cluster.kubectl("-n", namespace, "logs", "hello").stdout
    assert "hello from hello" in out
    # The container runs in the kubelet's pod cgroups (cgroupfs driver).
    assert int(out.split()[-1]) >= 1


def _gpu_view(cluster, namespace: str, name: str) -> tuple[dict[str, tuple[int, int]], list[str]]:
    out = exec_(cluster, namespace, name,
                'for d in /dev/nvidia*; do echo "dev $d $(stat -c "%t %T" $d)"; done; echo "env $NVIDIA_VISIBLE_DEVICES"')
    devices, env = {}, []
    for line in out.splitlines():
        if line.startswith("dev "):
            _, path, major, minor = line.split()
            devices[path] = (int(major, 16), int(minor, 16))
        elif line.startswith("env "):
            env = [d for d in line[4:].strip().split(",") if d]
    return devices, env


def node_names(cluster) -> list[str]:
    return sorted(cluster.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split())


def test_gpu_pods_get_distinct_fake_devices(cluster, namespace):
    gpus = {"resources": {"limits": {"nvidia.com/gpu": 2}}}
    # Both on one node, so that they compete for the same eight GPUs.
    on_node = {"nodeSelector": {"kubernetes.io/hostname": node_names(cluster)[0]}}
    apply(cluster, namespace, [pod("gpu-a", SLEEP, container=gpus, **on_node),
                               pod("gpu-b", SLEEP, container=gpus, **on_node)])
    wait_pod(cluster, namespace, "gpu-a")
    wait_pod(cluster, namespace, "gpu-b")
    seen = {}
    for name in ("gpu-a", "gpu-b"):
        devices, visible = _gpu_view(cluster, namespace, name)
        # Exactly two devices, renumbered from 0 inside the container ...
        assert sorted(devices) == ["/dev/nvidia0", "/dev/nvidia1"], devices
        # ... backed by two different host device nodes (NVIDIA's major 195).
        assert {major for major, _ in devices.values()} == {195}
        minors = {minor for _, minor in devices.values()}
        assert len(minors) == 2, devices
        assert len(visible) == 2 and len(set(visible)) == 2, visible
        seen[name] = (minors, set(visible))
    # The kubelet pinned different GPUs to the two pods, as on real hardware.
    assert not seen["gpu-a"][0] & seen["gpu-b"][0], seen
    assert not seen["gpu-a"][1] & seen["gpu-b"][1], seen


def test_service_dns_name_resolves_and_routes(cluster, namespace):
    labels = {"app": "web"}
    apply(cluster, namespace, [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{
                            "name": "httpd",
                            "image": BUSYBOX,
                            "command": ["sh", "-c", "mkdir -p /www && echo served-by-web > /www/index.html "
                                                    "&& exec httpd -f -p 8080 -h /www"],
                            "ports": [{"containerPort": 8080}],
                            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                        }],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        pod("client", SLEEP),
    ])
    cluster.kubectl("-n", namespace, "rollout", "status", "deploy/web", "--timeout=90s", timeout=120)
    wait_pod(cluster, namespace, "client")
    cluster_ip = cluster.kubectl("-n", namespace, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}").stdout
    resolv = exec_(cluster, namespace, "client", "cat /etc/resolv.conf")
    assert f"nameserver {DNS_IP}" in resolv
    fqdn = f"web.{namespace}.svc.cluster.local"
    out = exec_(cluster, namespace, "client", f"nslookup {fqdn}")
    assert re.search(rf"Address:\s*{re.escape(cluster_ip)}\b", out), out
    # The short name through the search path, and kube-proxy's DNAT to the pod.
    # Not `wget -T`: Debian's busybox-static 1.35 wget segfaults with it.
    result = wait_for(lambda: (r := cluster.kubectl("-n", namespace, "exec", "client", "--", "timeout", "5", "wget",
                                                    "-qO-", "http://web/", check=False)) and "served-by-web" in r.stdout and r,
                      30, "web through the Service's short name", interval=1)
    assert "served-by-web" in result.stdout, result.stderr


def test_pvc_binds_and_holds_data(cluster, namespace):
    apply(cluster, namespace, [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
        pod("writer", "echo kept > /data/file && cat /data/file",
            container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
    ])
    cluster.kubectl("-n", namespace, "wait", "pvc/data", "--for=jsonpath={.status.phase}=Bound", "--timeout=60s",
                    timeout=90)
    pvc = json.loads(cluster.kubectl("-n", namespace, "get", "pvc", "data", "-o", "json").stdout)
    assert pvc["spec"]["storageClassName"] == "standard"  # the default class applied
    wait_pod(cluster, namespace, "writer", "Succeeded")
    assert cluster.kubectl("-n", namespace, "logs", "writer").stdout.strip() == "kept"


def test_deleted_statefulset_pod_comes_back_under_its_name(cluster, namespace):
    labels = {"app": "db"}
    apply(cluster, namespace, [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "db"},
            "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{
                            "name": "main",
                            "image": BUSYBOX,
                            "command": ["sh", "-c", "echo boot >> /state/boots; " + SLEEP],
                            "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                        }],
                    },
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "state"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }],
            },
        },
    ])
    wait_for(lambda: cluster.kubectl("-n", namespace, "get", "pod", "db-0", check=False).returncode == 0,
             60, "the StatefulSet to make pod db-0", interval=1)
    wait_pod(cluster, namespace, "db-0")
    first_uid = cluster.kubectl("-n", namespace, "get", "pod", "db-0", "-o", "jsonpath={.metadata.uid}").stdout
    cluster.kubectl("-n", namespace, "delete", "pod", "db-0", "--wait=true", "--timeout=60s", timeout=90)
    def recreated() -> bool:
        result = cluster.kubectl("-n", namespace, "get", "pod", "db-0", "-o", "jsonpath={.metadata.uid}", check=False)
        return result.returncode == 0 and bool(result.stdout) and result.stdout != first_uid

    wait_for(recreated, 90, "db-0 recreated", interval=1)
    wait_pod(cluster, namespace, "db-0")
    # Same name, same volume: the new pod sees what the old one wrote.
    assert exec_(cluster, namespace, "db-0", "cat /state/boots").split() == ["boot", "boot"]
    assert exec_(cluster, namespace, "db-0", "hostname").strip() == "db-0"


HTTPD_ECHOING_PEER = (
    "mkdir -p /www/cgi-bin && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR\\n' "
    "> /www/cgi-bin/peer && chmod +x /www/cgi-bin/peer && exec httpd -f -p 8080 -h /www"
)


def test_pods_on_different_nodes_reach_each_other_unmasqueraded(cluster, namespace):
    nodes = node_names(cluster)
    if len(nodes) < 2:
        pytest.skip("one node (KUBESLURM_CLUSTER_NODES=2 make cluster-up for two)")
    apply(cluster, namespace, [
        pod("server", HTTPD_ECHOING_PEER, nodeSelector={"kubernetes.io/hostname": nodes[0]}),
        pod("client", SLEEP, nodeSelector={"kubernetes.io/hostname": nodes[1]}),
    ])
    wait_pod(cluster, namespace, "server")
    wait_pod(cluster, namespace, "client")
    ips = {name: cluster.kubectl("-n", namespace, "get", "pod", name, "-o", "jsonpath={.status.podIP}").stdout
           for name in ("server", "client")}
    out = exec_(cluster, namespace, "client", f"timeout 10 wget -qO- http://{ips['server']}:8080/cgi-bin/peer")
    # The server sees the client's own pod address: no NAT between pods (Slurm
    # daemons connect back to the addresses their peers report).
    peer = out.strip().removeprefix("[").removesuffix("]").removeprefix("::ffff:")  # httpd listens on IPv6
    assert peer == ips["client"], (out, ips)



def test_pod_from_the_kubeslurm_slurm_image_runs(cluster, namespace):
    # The builder caches by content: warm, this takes well under a second.
    built = subprocess.run([sys.executable, str(REPO / "images" / "build.py"), "--json", "slurm"],
                           capture_output=True, text=True, check=True, timeout=1800)
    image = json.loads(built.stdout.strip().splitlines()[-1])
    cluster.load_images([Path(image["path"])])
    # Only the daemons' -V works without a slurm.conf; the rest must at least be installed.
    script = ("slurmctld -V && slurmd -V && for p in slurmdbd sackd sbatch srun sacct sacctmgr; "
              "do command -v $p || exit 1; done && id slurm")
    apply(cluster, namespace, pod("slurm", script, container={"image": "localhost/kubeslurm/slurm:24.11",
                                                              "imagePullPolicy": "Never"}))
    wait_pod(cluster, namespace, "slurm", "Succeeded")
    out = cluster.kubectl("-n", namespace, "logs", "slurm").stdout
    assert out.count("slurm-wlm 24.11.") == 2, out
    for program in ("slurmdbd", "sackd", "sbatch", "srun", "sacct", "sacctmgr"):
        assert re.search(rf"^/usr/s?bin/{program}$", out, re.M), (program, out)
    assert "uid=64030(slurm)" in out, out


def test_a_node_powered_off_and_deleted_comes_back_with_power_on(cluster, namespace):
    """What the e2e story's lost-node chapter does to a node (power cut, then the Node object
    deleted as a cloud's node controller would), and power_on giving it back: the kubelet
    registers the Node again, Ready with its GPUs, and runs pods, so the suite goes on with
    every node."""
    from testbed.local_cluster import LocalCluster

    lc = LocalCluster(verbose=False)
    name = cluster.supervisor.load()["nodes"][-1]
    lc.power_off(name)
    try:
        cluster.kubectl("delete", "node", name, "--timeout=60s")
    finally:
        lc.power_on(name)
    node = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(DEFAULT_GPUS)
    assert name not in cluster.supervisor.load().get("powered_off", [])
    apply(cluster, namespace, pod("after-power-on", "ls /dev | grep -c '^nvidia[0-9]'",
                                  nodeSelector={"kubernetes.io/hostname": name},
                                  container={"resources": {"limits": {"nvidia.com/gpu": "1"}}}))
    wait_pod(cluster, namespace, "after-power-on", "Succeeded", timeout=120)
    assert cluster.kubectl("-n", namespace, "logs", "after-power-on").stdout.split() == ["1"]
    assert cluster.is_healthy()
