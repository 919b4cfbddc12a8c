"""Small SlurmClusters of their own for the e2e modules beyond the story (containers,
confinement): examples/demo.yaml changed the way a site would, in a namespace of its own,
and the login pod's commands as a researcher."""

from __future__ import annotations

import base64
import contextlib
import io
import tarfile
from typing import Callable, Iterator

import yaml

from testbed import deployment
from testbed.deployment import ROOT
from testbed.kubectl import Kube

CLUSTER = "research"
LOGIN = f"{CLUSTER}-login-0"
READY_TIMEOUT = 900


class Login:
    """Commands in the login pod of `namespace`'s cluster, as a researcher."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube, self.namespace = kube, namespace

    def sh(self, script: str, user: str = "alice", check: bool = True) -> str:
        # runuser, not su: the accounts' users have no password, and su's PAM account check refuses them.
        result = self.kube.exec(self.namespace, LOGIN, "login", ["runuser", "-l", user, "-c", script], check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{user}$ {script}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def put_tree(self, directory, into: str, user: str = "alice") -> None:
        """Copies a local directory into the pod as user (a tar over stdin, as data)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(directory), arcname=".")
        self.kube.run("exec", "-i", "-n", self.namespace, LOGIN, "-c", "login", "--", "runuser", "-u", user, "--",
                      "sh", "-c", f"mkdir -p {into} && base64 -d | tar -x -C {into}",
                      input=base64.b64encode(buffer.getvalue()).decode())

    def write(self, path: str, content: str, user: str = "alice") -> None:
        """Writes content to path as user (as data: base64, never shell text)."""
        encoded = base64.b64encode(content.encode()).decode()
        self.sh(f"mkdir -p $(dirname {path}) && echo {encoded} | base64 -d > {path}", user=user)

    def pod(self, name: str) -> dict:
        return self.kube.get("pod", name, "-n", self.namespace)


def slurm_index_list(ranges: str) -> set[int]:
    """0-1,3 -> {0, 1, 3}: Slurm's GRES IDX and GPU lists."""
    numbers: set[int] = set()
    for part in filter(None, ranges.split(",")):
        low, _, high = part.partition("-")
        numbers.update(range(int(low), int(high or low) + 1))
    return numbers


def bridged_only(node_set: str, partition: str, apps: str, account: str, user: str,
                 node_set_spec: dict | None = None) -> Callable[[list[dict]], list[dict]]:
    """A demo_variant change: the demo with only `node_set`, bridged (spec.bridged, with
    node_set_spec's fields on top), in one default `partition`; the bridge maps the application
    namespace `apps` to Slurm `account` and `user` (an account of its own)."""
    def change(documents: list[dict]) -> list[dict]:
        for document in documents:
            if document["kind"] == "SlurmCluster":
                spec = document["spec"]
                spec["partitions"] = [{"name": partition, "nodeSets": [node_set], "default": True}]
                spec["accounts"].append({"name": account, "shares": 10, "users": [user]})
                spec["bridge"] = {"enabled": True, "namespaces": [
                    {"namespace": apps, "account": account, "user": user, "partition": partition}]}
            elif document["kind"] == "NodeSet" and document["metadata"]["name"] == node_set:
                document["spec"].update({"bridged": True, **(node_set_spec or {})})
        return [d for d in documents if d["kind"] != "NodeSet" or d["metadata"]["name"] == node_set]
    return change


@contextlib.contextmanager
def demo_variant(kube: Kube, namespace: str, change: Callable[[list[dict]], list[dict]]) -> Iterator[Login]:
    """examples/demo.yaml in `namespace`, its documents passed through change(); Ready, then
    the login pod; the namespace is deleted afterwards."""
    kube.run("delete", "namespace", namespace, "--ignore-not-found", "--timeout=300s")
    kube.ensure_namespace(namespace, deployment.TEST_NAMESPACE_LABELS)
    documents = [d for d in yaml.safe_load_all((ROOT / "examples" / "demo.yaml").read_text()) if d]
    for document in documents:
        document["metadata"]["namespace"] = namespace
    try:  # a cluster that never became usable is deleted too: its pods would hold the next module's CPUs
        kube.apply("\n---\n".join(yaml.safe_dump(d) for d in change(documents)))
        deployment.wait_usable(kube, namespace, CLUSTER, READY_TIMEOUT, report=lambda line: print(line, flush=True))
        yield Login(kube, namespace)
    finally:
        kube.run("delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False)
