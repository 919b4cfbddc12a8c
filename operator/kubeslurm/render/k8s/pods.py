"""What every pod the operator creates shares, Slurm or not."""

DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


def empty_dir(name: str, medium: str | None = None) -> dict:
    return {"name": name, "emptyDir": {"medium": medium} if medium else {}}


def pod_spec(
    *,
    init_containers: list[dict],
    containers: list[dict],
    volumes: list[dict],
    termination_grace_seconds: int,
) -> dict:
    # Nothing in these pods talks to the Kubernetes API, so no token is mounted;
    # service links would put env vars of every Service in the namespace into every job.
    # The runtime's default seccomp profile refuses syscalls that no daemon or job here
    # needs (kernel modules, kexec, the kernel keyring, ...); Kubernetes leaves a
    # privileged container (slurmd with constrainWithCgroups) unconfined regardless.
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": termination_grace_seconds,
        **({"initContainers": init_containers} if init_containers else {}),
        "containers": containers,
        **({"volumes": volumes} if volumes else {}),
    }


def pod_template(pod_labels: dict[str, str], annotations: dict[str, str], spec: dict) -> dict:
    """A pod template whose first container is the one `kubectl exec` and `kubectl logs` pick."""
    all_annotations = {DEFAULT_CONTAINER_ANNOTATION: spec["containers"][0]["name"], **annotations}
    return {"metadata": {"labels": dict(pod_labels), "annotations": dict(sorted(all_annotations.items()))}, "spec": spec}


def tcp_readiness(port: int) -> dict:
    return {"tcpSocket": {"port": port}, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3}


def tcp_startup(port: int, within_seconds: int) -> dict:
    """The kubelet restarts the container when nothing listens on port within_seconds after it started."""
    period = 10
    return {"tcpSocket": {"port": port}, "periodSeconds": period, "timeoutSeconds": 5,
            "failureThreshold": max(1, within_seconds // period)}
