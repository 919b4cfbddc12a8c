"""slurmdbd: one pod that records every job in the accounting database.

Pod layout:
- init `install-config`: copies slurmdbd.conf (mode 0600, owner slurm: slurmdbd
  refuses a config others can read) from its Secret and the key into /etc/slurm.
  It then waits until the database host resolves and accepts TCP connections, so
  slurmdbd's first connection finds an initialised server: the internal database's
  address (render/database/services.py) takes connections once MariaDB listens on TCP,
  which it does only after its first initialisation.
- `slurmdbd -D`: foreground; it drops from root to SlurmUser itself. A startup probe
  restarts it when it has not listened within STARTUP_SECONDS: seen in `make demo`, the
  very first slurmdbd on a fresh database sometimes never listens (it has created the
  global tables, its main thread waits in pthread_join and SIGTERM is ignored; not
  root-caused) while a restarted one comes up at once. The bound is generous because
  a schema conversion after a Slurm upgrade also runs before slurmdbd listens; convert
  a large database by hand (`slurmdbd -D` in a one-off pod) before upgrading.

The pod template carries the hash of slurmdbd.conf, so a new database host or
password rolls slurmdbd. While it restarts slurmctld queues the records it sends.
slurmdbd.conf holds the password, so that hash is keyed (config_hash.keyed_config_hash).
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render import slurm_pod
from kubeslurm.render.config.slurmdbd_conf import database_connection
from kubeslurm.render.k8s import labels, naming, pods
from kubeslurm.render.k8s.config_hash import CONFIG_HASH_ANNOTATION, keyed_config_hash
from kubeslurm.render.k8s.secrets import SLURMDBD_CONF_FILE
from kubeslurm.render.k8s.statefulset import stateful_set
from kubeslurm.render.sssd_pods import add_sssd

TERMINATION_GRACE_SECONDS = 60
STARTUP_SECONDS = 300


# The database's address reaches the init container's shell as data (environment
# variables, quoted at every use), never as script text: a host name in the spec can
# hold nothing the shell would run.
DATABASE_HOST_ENV = "DATABASE_HOST"
DATABASE_PORT_ENV = "DATABASE_PORT"


def wait_for_database_lines() -> list[str]:
    """Shell lines that return once $DATABASE_HOST:$DATABASE_PORT accepts a TCP connection (bash: /dev/tcp)."""
    return [
        "tries=0",
        f'until timeout 3 bash -c \'< "/dev/tcp/$1/$2"\' wait-for-database "${DATABASE_HOST_ENV}" "${DATABASE_PORT_ENV}" 2>/dev/null; do',
        f'  [ $((tries % 150)) -eq 0 ] && echo "waiting for the accounting database ${DATABASE_HOST_ENV}:${DATABASE_PORT_ENV} to accept connections"',
        # every 0.2 s: slurmdbd, and slurmctld's first start behind it, are on the critical path of a new cluster
        "  tries=$((tries + 1)); sleep 0.2",
        "done",
    ]


def database_env(host: str, port: int) -> list[dict]:
    return [{"name": DATABASE_HOST_ENV, "value": host}, {"name": DATABASE_PORT_ENV, "value": str(port)}]


def accounting_stateful_set(
    cluster: SlurmCluster, slurmdbd_conf: str, config_hash_key: bytes, *, users: slurm_pod.UnixUsers,
    sssd_hash: str | None = None,
) -> dict:
    """config_hash_key: config_hash.config_hash_key of the cluster's auth key; sssd_hash: see add_sssd."""
    name = cluster.metadata.name
    statefulset = naming.accounting_statefulset(name)
    pod_labels = labels.object_labels(name, labels.ACCOUNTING)
    db = database_connection(cluster)
    slurmdbd = {
        "name": "slurmdbd",
        **slurm_pod.image_fields(cluster),
        "command": ["slurmdbd", "-D"],
        "ports": [{"name": "slurmdbd", "containerPort": naming.SLURMDBD_PORT, "protocol": "TCP"}],
        # slurmdbd listens only after it has connected to the database.
        "readinessProbe": pods.tcp_readiness(naming.SLURMDBD_PORT),
        "startupProbe": pods.tcp_startup(naming.SLURMDBD_PORT, STARTUP_SECONDS),
        "securityContext": {"runAsUser": 0},
        "volumeMounts": [slurm_pod.slurm_etc_mount(), *slurm_pod.user_mounts(cluster)],
    }
    install_config = slurm_pod.install_config_container(
        cluster, config_mode="0600", users=users, prepare=wait_for_database_lines()
    )
    install_config["env"] = [*install_config.get("env", []), *database_env(db.host, db.port)]
    spec = pods.pod_spec(
        init_containers=[install_config],
        containers=[slurmdbd],
        volumes=[
            pods.empty_dir(slurm_pod.SLURM_ETC_VOLUME),
            slurm_pod.secret_config_volume(naming.accounting_config_secret(name)),
            slurm_pod.key_volume(cluster),
            *slurm_pod.user_volumes(cluster),
        ],
        termination_grace_seconds=TERMINATION_GRACE_SECONDS,
    )
    annotations = {CONFIG_HASH_ANNOTATION: keyed_config_hash({SLURMDBD_CONF_FILE: slurmdbd_conf}, config_hash_key)}
    return stateful_set(
        name=statefulset,
        owner=cluster,
        object_labels=pod_labels,
        selector=labels.selector_labels(name, labels.ACCOUNTING),
        service_name=statefulset,
        replicas=1,
        template=add_sssd(cluster, pods.pod_template(pod_labels, annotations, spec), ("slurmdbd",), sssd_hash),
    )
