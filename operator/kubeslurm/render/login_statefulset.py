"""Login pods (`<cluster>-login-N`): where researchers run sbatch, srun, squeue, sacct.

Pod layout:
- init `install-config`: copies only the key into /etc/slurm.
- `/usr/sbin/sackd -D --conf-server <slurmctld...>`: fetches slurm.conf from slurmctld into
  /run/slurm/conf (configless; no ConfigMap mount), where the client commands find
  it, and serves auth/slurm credentials to them over /run/slurm/sack.socket. It is
  told of new configs by slurmctld after `scontrol reconfigure`, so a config change
  never restarts a login pod (no config-hash annotation).
  On that reconfigure sackd 24.11 re-executes itself with execve(argv[0]) (no PATH
  search, hence the absolute path) and, with -D (accepted, though its usage text
  omits it), does so in place: the container's main process keeps its PID. With
  --systemd it would fork a new sackd and exit, ending the container at every
  reconfigure (seen in the real-Slurm tier: "Relinquishing control to new sackd process").
"""

from ..api import SlurmCluster
from . import labels, naming, pods, slurm_pod
from .stateful_set import stateful_set

TERMINATION_GRACE_SECONDS = 30
SACKD = "/usr/sbin/sackd"


def login_stateful_set(cluster: SlurmCluster, *, users: slurm_pod.UnixUsers) -> dict:
    name = cluster.metadata.name
    statefulset = naming.login_statefulset(name)
    pod_labels = labels.object_labels(name, labels.LOGIN)
    sackd = {
        "name": "login",
        **slurm_pod.image_fields(cluster),
        "command": [SACKD, "-D", "--conf-server", naming.conf_server(name, cluster.spec.controller.backup)],
        "ports": [{"name": "sackd", "containerPort": naming.SLURMD_PORT, "protocol": "TCP"}],
        # sackd opens its reconfigure port (SlurmdPort) only after it fetched the
        # configs and loaded the key, i.e. once sbatch and squeue work here.
        "readinessProbe": pods.tcp_readiness(naming.SLURMD_PORT),
        "securityContext": {"runAsUser": 0},
        "volumeMounts": [
            slurm_pod.slurm_etc_mount(),
            {"name": slurm_pod.SLURM_RUN_VOLUME, "mountPath": slurm_pod.SLURM_RUN},
            *slurm_pod.user_mounts(cluster),
        ],
    }
    spec = pods.pod_spec(
        init_containers=[slurm_pod.install_config_container(cluster, config_mode=None, users=users)],
        containers=[sackd],
        volumes=[
            pods.empty_dir(slurm_pod.SLURM_ETC_VOLUME),
            slurm_pod.key_volume(cluster),
            pods.empty_dir(slurm_pod.SLURM_RUN_VOLUME),
            *slurm_pod.user_volumes(cluster),
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
