"""Where the e2e tier gets its Kubernetes cluster: one option, three providers.

    KUBESLURM_E2E_CLUSTER=local        the built-in local cluster (default; root, no Docker)
    KUBESLURM_E2E_CLUSTER=kubeconfig   a cluster you have: KUBESLURM_E2E_KUBECONFIG (or KUBECONFIG)
    KUBESLURM_E2E_CLUSTER=kind         a kind cluster made through pytest-kind (Docker)

(`pytest --e2e-cluster=...` says the same; KUBESLURM_E2E_KUBECONFIG alone still means
`kubeconfig`.) Everything after "here is a cluster" is shared: the same images from
images/build.py, the same helm install (testbed/deployment.py), the same story. A provider
only answers three questions: how the cluster starts and stops, how the images reach its
nodes, and whether its nodes have (fake) GPUs.

The kind provider cannot run on a machine without Docker; it is chosen explicitly, and when it
cannot start it fails with the reason, never a silent skip. It makes a four-worker kind cluster,
loads the image archives with kind's own `load image-archive` (kind nodes run containerd, so
the docker-archive tars images/build.py writes are what it takes), and runs the same fake GPU
device plugin as the local cluster, as a DaemonSet of the `fake-gpu` image on its workers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import yaml

from testbed import REPO, deployment
from testbed.control_plane.binaries import BinaryBuildError
from testbed.kind import build_kind
from testbed.kubectl import Kube, KubectlError, kubectl_binary

PROVIDER_ENV = "KUBESLURM_E2E_CLUSTER"
KUBECONFIG_ENV = "KUBESLURM_E2E_KUBECONFIG"
PROVIDERS = ("local", "kubeconfig", "kind")
KIND_CLUSTER_NAME = "kubeslurm-e2e"
FAKE_GPU_NAMESPACE = "kubeslurm-fake-gpu"
# Where the fake GPU device plugin makes its /dev/nvidiaN nodes on a kind node (a path
# inside the node container, which is also the path the node's containerd sees).
KIND_FAKE_GPU_DIR = "/var/lib/kubeslurm-fake-gpu/dev"


class ProviderError(RuntimeError):
    pass


def chosen_provider(option: str | None = None, environ: dict | None = None) -> str:
    """The provider named by the pytest option, else $KUBESLURM_E2E_CLUSTER, else `kubeconfig`
    when $KUBESLURM_E2E_KUBECONFIG is set, else `local`."""
    environ = os.environ if environ is None else environ
    name = option or environ.get(PROVIDER_ENV) or ("kubeconfig" if environ.get(KUBECONFIG_ENV) else "local")
    if name not in PROVIDERS:
        raise ProviderError(f"{PROVIDER_ENV}={name!r} is not a cluster provider; choose one of {', '.join(PROVIDERS)}")
    return name


@dataclass
class ClusterHandle:
    """A running cluster as the tests see it."""

    provider: str
    kube: Kube
    # Whether images are put on the nodes by us (local, kind: pullPolicy Never) rather than
    # pulled by the nodes from a registry the user pushed them to (kubeconfig).
    loads_images: bool
    load_images: Callable[[list[dict]], None] | None = field(repr=False, default=None)

    def load(self, images: list[dict]) -> None:
        if self.load_images:
            self.load_images(images)


@contextlib.contextmanager
def provided_cluster(provider: str, *, nodes: int, environ: dict | None = None) -> Iterator[ClusterHandle]:
    environ = os.environ if environ is None else environ
    if provider == "kubeconfig":
        yield _user_cluster(environ)
    elif provider == "local":
        with _local_cluster(nodes) as handle:
            yield handle
    elif provider == "kind":
        with _kind_cluster(nodes) as handle:
            yield handle
    else:
        raise ProviderError(f"unknown cluster provider {provider!r}; choose one of {', '.join(PROVIDERS)}")


# -- kubeconfig: the user's cluster ------------------------------------------------------


def _user_cluster(environ: dict) -> ClusterHandle:
    kubeconfig = environ.get(KUBECONFIG_ENV) or environ.get("KUBECONFIG")
    if not kubeconfig:
        raise ProviderError(f"{PROVIDER_ENV}=kubeconfig needs {KUBECONFIG_ENV} (or KUBECONFIG): the cluster's kubeconfig")
    kube = Kube(kubeconfig)
    if not kube.reachable():
        raise ProviderError(f"the cluster of {kubeconfig} does not answer: check the file and that the cluster runs")
    # Its nodes pull the images themselves: push images/build.py's tars to a registry they
    # reach and set the chart's image values (README: "Trying it on your own cluster").
    return ClusterHandle("kubeconfig", kube, loads_images=False)


# -- local: testbed/local_cluster ---------------------------------------------------------


@contextlib.contextmanager
def _local_cluster(nodes: int) -> Iterator[ClusterHandle]:
    if os.geteuid() != 0:
        raise ProviderError(f"the local cluster needs root (or {PROVIDER_ENV}=kubeconfig / kind)")
    from testbed.local_cluster import ClusterError, running_local_cluster

    try:
        with running_local_cluster(nodes, min_nodes=nodes) as cluster:
            yield ClusterHandle("local", Kube(str(cluster.kubeconfig_path)), loads_images=True,
                                load_images=deployment.load_into_local_cluster)
    except ClusterError as error:
        raise ProviderError(str(error)) from error


# -- kind: pytest-kind --------------------------------------------------------------------


def kind_config(workers: int) -> str:
    """A kind cluster of one control plane and `workers` workers; the workers get the label the
    fake GPU DaemonSet selects (the control plane runs no slurmd, as on the local cluster)."""
    lines = ["kind: Cluster", "apiVersion: kind.x-k8s.io/v1alpha4", "nodes:", "- role: control-plane"]
    for _ in range(workers):
        lines += ["- role: worker", "  labels:", "    kubeslurm.io/fake-gpus: \"true\""]
    return "\n".join(lines) + "\n"


def fake_gpu_daemonset(image: str, count: int = 8) -> list[dict]:
    """The local cluster's fake GPU device plugin (testbed/local_cluster/fake_gpu) as a
    DaemonSet: it registers with each worker's kubelet through the device-plugins directory and
    makes its character devices in a host directory that the node's runtime then hands to the
    containers given a GPU. Privileged, because mknod of 195:N needs CAP_MKNOD on the node."""
    labels = {"app.kubernetes.io/name": "kubeslurm-fake-gpu"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FAKE_GPU_NAMESPACE}},
        {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "fake-gpu", "namespace": FAKE_GPU_NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubeslurm.io/fake-gpus": "true"},
                        "priorityClassName": "system-node-critical",
                        "containers": [{
                            "name": "plugin",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "args": ["--node-name=$(NODE_NAME)", f"--count={count}",
                                     f"--device-dir={KIND_FAKE_GPU_DIR}",
                                     "--plugin-dir=/var/lib/kubelet/device-plugins"],
                            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                            "securityContext": {"privileged": True},
                            "volumeMounts": [
                                {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
                                {"name": "devices", "mountPath": KIND_FAKE_GPU_DIR},
                            ],
                        }],
                        "volumes": [
                            {"name": "device-plugins", "hostPath": {"path": "/var/lib/kubelet/device-plugins",
                                                                    "type": "Directory"}},
                            {"name": "devices", "hostPath": {"path": KIND_FAKE_GPU_DIR, "type": "DirectoryOrCreate"}},
                        ],
                    },
                },
            },
        },
    ]


@contextlib.contextmanager
def _kind_cluster(nodes: int) -> Iterator[ClusterHandle]:
    try:
        from pytest_kind import KindCluster
    except ImportError as error:
        raise ProviderError(f"{PROVIDER_ENV}=kind needs pytest-kind (`.venv/bin/pip install pytest-kind`) "
                            "and Docker") from error
    work = REPO / ".pytest-kind"
    work.mkdir(exist_ok=True)
    config = work / "kubeslurm-kind.yaml"
    config.write_text(kind_config(nodes))
    try:
        # Our pinned kind and kubectl (built from the Go module proxy), not pytest-kind's downloads.
        cluster = KindCluster(KIND_CLUSTER_NAME, kubeconfig=work / "kubeconfig", kind_path=build_kind(),
                              kubectl_path=Path(kubectl_binary()))
        cluster.create(config_file=config)
    except (OSError, subprocess.CalledProcessError, BinaryBuildError, KubectlError) as error:
        raise ProviderError(f"kind could not create the cluster (is Docker running?): {error}") from error
    kube = Kube(str(cluster.kubeconfig_path))

    def load(images: list[dict]) -> None:
        [fake_gpu] = deployment.build_images(("fake-gpu",))
        for image in [*images, fake_gpu]:
            subprocess.run([str(cluster.kind_path), "load", "image-archive", "--name", KIND_CLUSTER_NAME,
                            image["path"]], check=True)
        kube.run("apply", "-f", "-", input=yaml.safe_dump_all(fake_gpu_daemonset(fake_gpu["tags"][0])))
        kube.run("rollout", "status", "daemonset/fake-gpu", "-n", FAKE_GPU_NAMESPACE, "--timeout=180s")

    try:
        yield ClusterHandle("kind", kube, loads_images=True, load_images=load)
    finally:
        # KUBESLURM_KEEP_KIND=1 keeps it for a look afterwards (pytest-kind reuses it next time).
        if not os.environ.get("KUBESLURM_KEEP_KIND"):
            cluster.delete()
