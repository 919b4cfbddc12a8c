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


# A startup probe that makes a slow start restart the container only after an hour: the
# daemon may wait that long for another (slurmd for slurmctld, slurmctld loading a large state).
PATIENT_START_SECONDS = 3600


def startup_probe(check: dict, within_seconds: int = PATIENT_START_SECONDS) -> dict:
    """The readiness check (or one that passes at the same moment and costs less: TCP on the
    daemon's port where readiness is an exec), every second, until it first passes. Why: the
    kubelet runs the readiness probe at once when the startup probe passes
    (prober_manager.UpdatePodStatus triggers it), so the pod turns Ready within about a second
    of its daemon answering instead of up to a readiness period (10-15 s) later; at start that
    wait adds up along the chain MariaDB -> slurmdbd -> slurmctld -> slurmd. After it passes it
    stops: the steady cost is the readiness probe's. The kubelet restarts the container when the
    check has not passed within within_seconds."""
    return {**check, "periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": within_seconds}


def tcp_startup(port: int, within_seconds: int = PATIENT_START_SECONDS) -> dict:
    """startup_probe of a TCP check on port."""
    return startup_probe({"tcpSocket": {"port": port}}, within_seconds)
