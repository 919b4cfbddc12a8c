"""Kube: kubectl against one cluster, the one wrapper the test bed, the demo and the
tests use (the control plane, the local cluster and any cluster from KUBECONFIG)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("KUBESLURM_CACHE", Path.home() / ".cache" / "kubeslurm"))


class KubectlError(RuntimeError):
    pass


def kubectl_binary() -> str:
    """The pinned kubectl built by testbed/kubernetes/build.sh, else the one on PATH."""
    found = sorted(CACHE.glob("kubernetes/*/bin/kubectl"))
    if found:
        return str(found[-1])
    path = shutil.which("kubectl")
    if not path:
        raise KubectlError("no kubectl: run `make cluster-up` once (it builds one) or install kubectl")
    return path


@dataclass
class Kube:
    """kubectl against one cluster (its kubeconfig), with JSON and exec helpers.

    binary: the kubectl to run (default: kubectl_binary()).
    """

    kubeconfig: str
    binary: str | None = None

    def run(self, *args: str, check: bool = True, capture: bool = True, input: str | None = None,
            timeout: float | None = 600, kubeconfig: Path | str | None = None) -> subprocess.CompletedProcess:
        """kubectl ARGS (as another user when kubeconfig names one); KubectlError when it
        fails and check."""
        result = subprocess.run(
            [self.binary or kubectl_binary(), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            text=True, input=input, timeout=timeout,
            stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None)
        if check and result.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)} exited {result.returncode}:\n"
                               f"{(result.stderr or '').strip()}\n{(result.stdout or '').strip()}")
        return result

    __call__ = run

    def get(self, *args: str) -> dict | None:
        """`kubectl get ... -o json`, None when it does not exist."""
        result = self.run("get", *args, "-o", "json", check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise KubectlError(f"kubectl get {' '.join(args)}: {result.stderr.strip()}")
        return json.loads(result.stdout)

    def reachable(self) -> bool:
        return self.run("--request-timeout=5s", "get", "--raw", "/readyz", check=False, timeout=30).returncode == 0

    def apply(self, manifest: str | Path, namespace: str | None = None) -> None:
        ns = ["-n", namespace] if namespace else []
        if isinstance(manifest, Path):
            self.run("apply", *ns, "-f", str(manifest))
        else:
            self.run("apply", *ns, "-f", "-", input=manifest)

    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}))

    def exec(self, namespace: str, pod: str, container: str, command: list[str], *,
             check: bool = True, capture: bool = True, timeout: float | None = 600) -> subprocess.CompletedProcess:
        return self.run("exec", "-n", namespace, pod, "-c", container, "--", *command, check=check,
                        capture=capture, timeout=timeout)
