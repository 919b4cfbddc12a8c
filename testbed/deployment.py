"""Putting kubeslurm onto a running cluster, the way a platform team does: images built
by images/build.py (loaded into the local cluster's containerd), the operator installed
with its helm chart, SlurmCluster manifests applied with kubectl, and a wait until
Slurm is usable. Shared by `make demo` (testbed/demo.py), the e2e suite (tests/e2e) and the
benchmarks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import yaml

from kubeslurm.render.bridge.bridged_nodes import BRIDGE_NODE_KEY
from testbed import REPO
from testbed.helm import build_helm
from testbed.kubectl import Kube, KubectlError
from testbed.local_cluster.layout import KUBECONFIG, Node
from testbed.waiting import wait_for

ROOT = REPO
LOCAL_KUBECONFIG = str(KUBECONFIG)
OPERATOR_NAMESPACE = "kubeslurm-system"
OPERATOR_RELEASE = "kubeslurm-operator"


class DeploymentError(RuntimeError):
    pass


def helm_binary() -> str:
    """The pinned helm of testbed/helm (built from the Go module proxy once, then cached)."""
    return str(build_helm())


# -- images -------------------------------------------------------------------------


# What the operator and a SlurmCluster run (ldap: the e2e tier's directory). images/build.py
# knows one more, fake-gpu, which only the kind provider needs (testbed/cluster_providers.py).
CLUSTER_IMAGES = ("slurm", "mariadb", "ldap", "operator")


def build_images(names: tuple[str, ...] = CLUSTER_IMAGES) -> list[dict]:
    """images/build.py: one dict per image (name, path of the docker-archive tar, tags, cached)."""
    out = subprocess.run([sys.executable, str(ROOT / "images/build.py"), "--json", *names], check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def load_into_local_cluster(images: list[dict]) -> None:
    subprocess.run([sys.executable, "-m", "testbed.local_cluster", "load", *[image["path"] for image in images]],
                   check=True, cwd=ROOT)


# -- the operator -------------------------------------------------------------------


def install_operator(kubeconfig: str, images: list[dict], *, local: bool, extra_values: list[str] = ()) -> None:
    """`helm upgrade --install` of charts/kubeslurm-operator, waiting for the Deployment."""
    pull = "Never" if local else "IfNotPresent"
    # The tag stays 0.1.0 while the code changes: an annotation with the tar's content hash
    # (images/build.py names tars by content) rolls the operator pod when its image changed.
    [operator] = [image for image in images if image["name"] == "operator"]
    image_id = Path(operator["path"]).stem.rsplit("-", 1)[-1]
    # helm installs the chart's CRDs only when absent and never upgrades them: apply them the
    # way the README's upgrade note says, so a cluster that had an older operator takes new fields.
    Kube(kubeconfig).run("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "charts/kubeslurm-operator/crds"))
    subprocess.run([helm_binary(), "upgrade", "--install", OPERATOR_RELEASE, str(ROOT / "charts/kubeslurm-operator"),
                    "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
                    "--set", f"image.pullPolicy={pull}", "--set", "logFormat=plain",
                    "--set-string", f"podAnnotations.kubeslurm\\.io/image-content={image_id}",
                    *extra_values, "--wait", "--timeout", "5m"],
                   check=True, env=dict(os.environ, KUBECONFIG=kubeconfig))


def local_cluster_operator_values() -> list[str]:
    """helm arguments for the built-in local cluster: its fake GPUs' device files are in a folder
    of each node (testbed/local_cluster: Node(n).dir/dev), not in /dev; the device plugin of a
    bridged cluster mounts node 1's, the node bridge_test_node picks."""
    return ["--set", f"devicePlugin.deviceDir={Node(1).dir / 'dev'}"]


def uninstall_operator(kubeconfig: str) -> None:
    subprocess.run([helm_binary(), "uninstall", OPERATOR_RELEASE, "--namespace", OPERATOR_NAMESPACE,
                    "--ignore-not-found", "--wait"], check=False, env=dict(os.environ, KUBECONFIG=kubeconfig))


def operator_release_exists(kubeconfig: str) -> bool:
    result = subprocess.run([helm_binary(), "status", OPERATOR_RELEASE, "--namespace", OPERATOR_NAMESPACE],
                            text=True, capture_output=True, env=dict(os.environ, KUBECONFIG=kubeconfig))
    return result.returncode == 0


# -- the operator's own pod (faults are injected into it) ------------------------------


def operator_pod(kube: Kube) -> dict:
    """The operator's live pod (not one being deleted)."""
    pods = kube.get("pods", "-n", OPERATOR_NAMESPACE, "-l", f"app.kubernetes.io/instance={OPERATOR_RELEASE}")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert live, json.dumps([p["metadata"]["name"] for p in pods])
    return live[0]


def kill_operator(kube: Kube) -> str:
    """The operator's pod deleted with no grace: its process SIGKILLed wherever it stood (its
    Deployment makes a new one). Returns the killed pod's UID."""
    pod = operator_pod(kube)
    kube.run("delete", "pod", pod["metadata"]["name"], "-n", OPERATOR_NAMESPACE,
             "--grace-period=0", "--force", "--wait=false")
    return pod["metadata"]["uid"]


# -- a SlurmCluster applied in a namespace of its own --------------------------------


# On every namespace a test makes: a test session starts by deleting those an earlier,
# interrupted session left (their pods would hold the small local cluster's CPUs).
TEST_NAMESPACE_LABELS = {"kubeslurm.io/test-namespace": "true"}


def delete_test_namespaces(kube: Kube) -> None:
    selector = ",".join(f"{key}={value}" for key, value in TEST_NAMESPACE_LABELS.items())
    kube.run("delete", "namespace", "-l", selector, "--ignore-not-found", "--timeout=300s")
    release_bridged_nodes(kube)  # a node an interrupted session dedicated would keep its taint


# -- Kubernetes nodes dedicated to a cluster's bridge (NodeSet spec.bridged) -------------------
#
# What the admin does, by hand (README "Bridged NodeSets"); the operator never changes Nodes.


def dedicate_node_to_bridge(kube: Kube, node: str, cluster: str) -> None:
    """Label and taint `node` kubeslurm.io/bridge=<cluster>: only the cluster's bridged slurmd
    pods and its device plugin, which tolerate the taint, are scheduled there."""
    kube.run("label", "node", node, f"{BRIDGE_NODE_KEY}={cluster}", "--overwrite")
    kube.run("taint", "node", node, f"{BRIDGE_NODE_KEY}={cluster}:NoSchedule", "--overwrite")


def bridge_test_node(kube: Kube) -> str:
    """The node the tests dedicate to a bridge: the first Ready one by name."""
    for node in sorted(kube.get("nodes")["items"], key=lambda n: n["metadata"]["name"]):
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])):
            return node["metadata"]["name"]
    raise DeploymentError("no Ready node to dedicate to the bridge")


def release_bridged_nodes(kube: Kube) -> None:
    """Every node's bridge label and taint removed (pods already there stay until they go)."""
    for node in kube.get("nodes")["items"]:
        name = node["metadata"]["name"]
        if BRIDGE_NODE_KEY in (node["metadata"].get("labels") or {}):
            kube.run("label", "node", name, f"{BRIDGE_NODE_KEY}-")
        if any(t.get("key") == BRIDGE_NODE_KEY for t in node.get("spec", {}).get("taints") or []):
            kube.run("taint", "node", name, f"{BRIDGE_NODE_KEY}-")


def apply_in_fresh_namespace(kube: Kube, manifest: Path, namespace: str,
                             adjust: Callable[[dict], None] = lambda document: None) -> None:
    """The namespace deleted (what a previous run left) and made again, and the manifest's
    documents applied in it, each first passed to adjust (a test's changes to the example)."""
    kube.run("delete", "namespace", namespace, "--ignore-not-found", "--timeout=300s")
    kube.ensure_namespace(namespace, TEST_NAMESPACE_LABELS)
    documents = [d for d in yaml.safe_load_all(Path(manifest).read_text()) if d]
    for document in documents:
        document["metadata"]["namespace"] = namespace
        adjust(document)
    kube.apply("\n---\n".join(yaml.safe_dump(d) for d in documents))


# -- a SlurmCluster becoming usable -------------------------------------------------


def _ready(obj: dict | None) -> bool:
    conditions = (obj or {}).get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pods_summary(kube: Kube, namespace: str) -> str:
    pods = (kube.get("pods", "-n", namespace) or {}).get("items", [])
    parts = []
    for pod in pods:
        status = pod.get("status", {})
        containers = status.get("containerStatuses", [])
        state = status.get("phase", "?")
        for container in status.get("initContainerStatuses", []) + containers:
            waiting = container.get("state", {}).get("waiting")
            if waiting and waiting.get("reason") not in (None, "PodInitializing"):
                state = waiting["reason"]
        ready = containers and all(c.get("ready") for c in containers)
        restarts = sum(c.get("restartCount", 0) for c in containers)
        parts.append(f"{pod['metadata']['name']}={state}{' ready' if ready else ''}"
                     f"{f' restarts={restarts}' if restarts else ''}")
    return ", ".join(sorted(parts)) or "(no pods yet)"


def _rolled_out(sts: dict) -> bool:
    status, wanted = sts.get("status", {}), sts["spec"].get("replicas", 1)
    return (status.get("observedGeneration") == sts["metadata"]["generation"]
            and status.get("readyReplicas", 0) == wanted and status.get("updatedReplicas", 0) == wanted
            and status.get("currentRevision") == status.get("updateRevision"))


def readiness(kube: Kube, namespace: str, cluster: str) -> tuple[bool, str]:
    """Usable = the SlurmCluster is Ready (slurmctld answers, every object applied), every
    NodeSet is Ready (its slurmd pods registered), and every StatefulSet of the cluster has
    rolled out and is ready (login: sackd has the config; accounting: sacct answers).
    Returns (usable, a one-line account of the state)."""
    obj = kube.get("slurmcluster", cluster, "-n", namespace)
    message = next((c.get("message", "") for c in (obj or {}).get("status", {}).get("conditions", [])
                    if c.get("type") == "Ready"), "no Ready condition yet")
    node_sets = [n for n in (kube.get("nodesets", "-n", namespace) or {}).get("items", [])
                 if n["spec"].get("clusterName") == cluster]
    selector = f"app.kubernetes.io/name=slurm,app.kubernetes.io/instance={cluster}"
    stateful_sets = (kube.get("statefulsets", "-n", namespace, "-l", selector) or {}).get("items", [])
    pending = sorted(s["metadata"]["name"] for s in stateful_sets if not _rolled_out(s))
    usable = _ready(obj) and bool(node_sets) and all(_ready(n) for n in node_sets) \
        and bool(stateful_sets) and not pending
    sets = " ".join(f"{n['metadata']['name']}={'Ready' if _ready(n) else f'NotReady ({_ready_message(n)})'}"
                    for n in node_sets)
    line = (f"SlurmCluster Ready={_ready(obj)} {message} | NodeSets {sets or '-'} | "
            f"rolling out: {', '.join(pending) or '-'} | {pods_summary(kube, namespace)}")
    return usable, line


def _ready_message(obj: dict) -> str:
    return next((c.get("message") or c.get("reason") or "" for c in obj.get("status", {}).get("conditions", [])
                 if c.get("type") == "Ready"), "") or "no Ready condition yet"


def wait_usable(kube: Kube, namespace: str, cluster: str, timeout: float,
                report: Callable[[str], None] = print) -> float:
    """Waits until readiness() holds; reports each change of state; returns the seconds waited."""
    return wait_reporting(kube, namespace, cluster, timeout, f"SlurmCluster {namespace}/{cluster} to be usable", report)


def wait_reporting(kube: Kube, namespace: str, cluster: str, timeout: float, what: str,
                   report: Callable[[str], None] = print, done: Callable[[], bool] | None = None,
                   interval: float = 2, report_every: float = 0) -> float:
    """Waits until done() holds (default: the cluster is usable, readiness()), never silently:
    each change of the cluster's state (its and its NodeSets' Ready messages, which name Pending
    pods with the scheduler's reason, and the pods' states) is reported as it happens, and after
    `timeout` it gives up with DeploymentError carrying the last state. Returns the seconds waited.
    With done() given, report_every > 0 reads that state (four kubectl calls) at most once per
    report_every seconds, the first after report_every, so a benchmark can poll done() often
    without those calls pacing it or loading the start it measures; a wait that gives up reads it then."""
    t0 = time.monotonic()
    deferred = done is not None and report_every > 0
    last = {"line": None, "read_at": t0 if deferred else None}

    def check() -> bool:
        now = time.monotonic()
        if done is None or last["read_at"] is None or now - last["read_at"] >= report_every:
            ok, line = readiness(kube, namespace, cluster)
            last["read_at"] = now
            if line != last["line"]:
                report(f"[{now - t0:5.0f} s] {line}")
                last["line"] = line
            if done is None:
                return ok
        return done()

    def details() -> str:
        line = last["line"]
        if line is None:  # deferred and never read: read it now, without hiding what timed out
            try:
                line = readiness(kube, namespace, cluster)[1]
            except KubectlError as error:
                line = f"the cluster's state could not be read ({error})"
        return (f"{line}; see `kubectl describe slurmcluster,nodesets -n {namespace}` and "
                f"`kubectl logs -n {OPERATOR_NAMESPACE} deploy/{OPERATOR_RELEASE}`")

    wait_for(check, timeout, what, interval=interval, error=DeploymentError, details=details)
    return time.monotonic() - t0
