"""slurmdbd: one pod that records every job in the accounting database.

Pod layout:
- init `install-config`: copies slurmdbd.conf (mode 0600, owner slurm: slurmdbd
  refuses a config others can read) from its Secret and the key into /etc/slurm.
- `slurmdbd -D`: foreground; it drops from root to SlurmUser itself.

The pod template carries the hash of slurmdbd.conf, so a new database host or
password rolls slurmdbd. While it restarts slurmctld queues the records it sends.
"""

from ..api import SlurmCluster
from . import labels, naming, pods, slurm_pod
from .config_hash import CONFIG_HASH_ANNOTATION, config_hash
from .secrets import SLURMDBD_CONF_FILE
from .stateful_set import stateful_set

TERMINATION_GRACE_SECONDS = 60


def accounting_stateful_set(cluster: SlurmCluster, slurmdbd_conf: str) -> dict:
    name = cluster.metadata.name
    statefulset = naming.accounting_statefulset(name)
    pod_labels = labels.object_labels(name, labels.ACCOUNTING)
    slurmdbd = {
        "name": "slurmdbd",
        **slurm_pod.image_fields(cluster),
        "command": ["slurmdbd", "-D"],
        "ports": [{"name": "slurmdbd", "containerPort": naming.SLURMDBD_PORT, "protocol": "TCP"}],
        # slurmdbd listens only after it has connected to the database.
        "readinessProbe": pods.tcp_readiness(naming.SLURMDBD_PORT),
        "securityContext": {"runAsUser": 0},
        "volumeMounts": [slurm_pod.slurm_etc_mount()],
    }
    spec = pods.pod_spec(
        init_containers=[slurm_pod.install_config_container(cluster, config_mode="0600")],
        containers=[slurmdbd],
        volumes=[
            pods.empty_dir(slurm_pod.SLURM_ETC_VOLUME),
            slurm_pod.secret_config_volume(naming.slurmdbd_secret(name)),
            slurm_pod.key_volume(cluster),
        ],
        termination_grace_seconds=TERMINATION_GRACE_SECONDS,
    )
    annotations = {CONFIG_HASH_ANNOTATION: config_hash({SLURMDBD_CONF_FILE: slurmdbd_conf})}
    return stateful_set(
        name=statefulset,
        owner=cluster,
        object_labels=pod_labels,
        selector=labels.selector_labels(name, labels.ACCOUNTING),
        service_name=statefulset,
        replicas=1,
        template=pods.pod_template(pod_labels, annotations, spec),
    )
