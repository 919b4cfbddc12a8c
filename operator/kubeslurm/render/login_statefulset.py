"""Login pods (`<cluster>-login-N`): where researchers run sbatch, srun, squeue, sacct.

Pod layout:
- init `install-config`: copies only the key into /etc/slurm.
- `sackd --systemd --conf-server <slurmctld...>`: fetches slurm.conf from slurmctld into
  /run/slurm/conf (configless; no ConfigMap mount), where the client commands find
  it, and serves auth/slurm credentials to them over /run/slurm/sack.socket. It is
  told of new configs by slurmctld after `scontrol reconfigure`, so a config change
  never restarts a login pod (no config-hash annotation).
  Slurm 24.11's sackd has no -D: without --systemd it forks into the background
  (the container would exit), and --systemd wants NOTIFY_SOCKET set; a socket path
  nobody listens on keeps it in the foreground (seen working in the real-Slurm tier).
"""

from ..api import SlurmCluster
from . import labels, naming, pods, slurm_pod
from .stateful_set import stateful_set

TERMINATION_GRACE_SECONDS = 30


def login_stateful_set(cluster: SlurmCluster) -> dict:
    name = cluster.metadata.name
    statefulset = naming.login_statefulset(name)
    pod_labels = labels.object_labels(name, labels.LOGIN)
    sackd = {
        "name": "login",
        **slurm_pod.image_fields(cluster),
        "command": ["sackd", "--systemd", "--conf-server", naming.conf_server(name, cluster.spec.controller.backup)],
        "env": [{"name": "NOTIFY_SOCKET", "value": f"{slurm_pod.SLURM_RUN}/notify-nobody"}],
        "ports": [{"name": "sackd", "containerPort": naming.SLURMD_PORT, "protocol": "TCP"}],
        # sackd opens its reconfigure port (SlurmdPort) only after it fetched the
        # configs and loaded the key, i.e. once sbatch and squeue work here.
        "readinessProbe": pods.tcp_readiness(naming.SLURMD_PORT),
        "securityContext": {"runAsUser": 0},
        "volumeMounts": [
            slurm_pod.slurm_etc_mount(),
            {"name": slurm_pod.SLURM_RUN_VOLUME, "mountPath": slurm_pod.SLURM_RUN},
        ],
    }
    spec = pods.pod_spec(
        init_containers=[slurm_pod.install_config_container(cluster, config_mode=None)],
        containers=[sackd],
        volumes=[
            pods.empty_dir(slurm_pod.SLURM_ETC_VOLUME),
            slurm_pod.key_volume(cluster),
            pods.empty_dir(slurm_pod.SLURM_RUN_VOLUME),
        ],
        termination_grace_seconds=TERMINATION_GRACE_SECONDS,
    )
    return stateful_set(
        name=statefulset,
        owner=cluster,
        object_labels=pod_labels,
        selector=labels.selector_labels(name, labels.LOGIN),
        service_name=statefulset,
        replicas=cluster.spec.login.replicas,
        template=pods.pod_template(pod_labels, {}, spec),
    )
