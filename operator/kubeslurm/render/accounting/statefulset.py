"""slurmdbd: one pod that records every job in the accounting database.

Pod layout:
- init `install-config`: copies slurmdbd.conf (mode 0600, owner slurm: slurmdbd
  refuses a config others can read) from its Secret and the key into /etc/slurm.
- `slurmdbd`: a bash script (SLURMDBD_START) is the container's PID 1. It waits until
  the database host resolves and accepts TCP connections, so slurmdbd's first
  connection finds an initialised server (the internal database's address,
  render/database/services.py, takes connections once MariaDB listens on TCP, which
  it does only after its first initialisation); then it runs `slurmdbd -D` (which
  drops from root to SlurmUser itself), passes SIGTERM on and ends with it. The wait
  is in this container, not the init container: the kubelet notices an init
  container's exit only at its next relist (once a second) before it creates the next
  container, and slurmdbd is on a new cluster's start chain (MariaDB, slurmdbd,
  slurmctld, slurmd). The script stops slurmdbd (SIGKILL) and exits, for the kubelet
  to start it again, when it has not listened within STARTUP_SECONDS: seen in
  `make demo`, the very first slurmdbd on a fresh database sometimes never listens
  (it has created the global tables, its main thread waits in pthread_join and SIGTERM
  is ignored; not root-caused) while a restarted one comes up at once. The bound is
  generous because a schema conversion after a Slurm upgrade also runs before slurmdbd
  listens; convert a large database by hand (`slurmdbd -D` in a one-off pod) before
  upgrading. slurmdbd is not PID 1 because of that: a PID 1 ignores even SIGKILL from
  inside its container. The startup probe (TCP) only makes the pod Ready within a second
  of slurmdbd listening; its hour-long bound is a last resort, as the wait for the
  database counts in it.

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


# The database's address and slurmdbd's port reach the script as data (environment
# variables, quoted at every use), never as script text: a host name in the spec can
# hold nothing the shell would run.
DATABASE_HOST_ENV = "DATABASE_HOST"
DATABASE_PORT_ENV = "DATABASE_PORT"
SLURMDBD_PORT_ENV = "SLURMDBD_PORT"
# Polls every 0.2 s: slurmdbd, and slurmctld's first start behind it, are on the critical path
# of a new cluster. Run as `bash -c SLURMDBD_START slurmdbd-start slurmdbd -D`.
SLURMDBD_START = "\n".join([
    # Until slurmdbd runs, a stop ends the wait (a PID 1 without a handler ignores SIGTERM).
    "trap 'exit 143' TERM INT",
    "tries=0",
    f'until timeout 3 bash -c \'< "/dev/tcp/$0/$1"\' "${DATABASE_HOST_ENV}" "${DATABASE_PORT_ENV}" 2>/dev/null; do',
    f'  [ $((tries % 150)) -eq 0 ] && echo "kubeslurm: waiting for the accounting database ${DATABASE_HOST_ENV}:${DATABASE_PORT_ENV} to accept connections" >&2',
    "  tries=$((tries + 1)); sleep 0.2",
    "done",
    '"$@" &',
    "daemon=$!",
    "trap 'kill -TERM \"$daemon\" 2>/dev/null' TERM INT",
    "tries=0",
    f'until timeout 3 bash -c \'< "/dev/tcp/127.0.0.1/$0"\' "${SLURMDBD_PORT_ENV}" 2>/dev/null; do',
    '  kill -0 "$daemon" 2>/dev/null || break',
    f"  if [ $tries -ge {STARTUP_SECONDS * 5} ]; then",
    f'    echo "kubeslurm: slurmdbd has not listened on port ${SLURMDBD_PORT_ENV} within {STARTUP_SECONDS} s; stopping it to be started again" >&2',
    '    kill -KILL "$daemon"; wait "$daemon"; exit 1',
    "  fi",
    "  tries=$((tries + 1)); sleep 0.2",
    "done",
    # A trapped signal ends `wait` early: wait again until slurmdbd itself has ended.
    'wait "$daemon"; status=$?',
    'while kill -0 "$daemon" 2>/dev/null; do wait "$daemon"; status=$?; done',
    "exit $status",
])


def slurmdbd_env(host: str, port: int) -> list[dict]:
    return [{"name": DATABASE_HOST_ENV, "value": host}, {"name": DATABASE_PORT_ENV, "value": str(port)},
            {"name": SLURMDBD_PORT_ENV, "value": str(naming.SLURMDBD_PORT)}]


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
        "command": ["/bin/bash", "-c", SLURMDBD_START, "slurmdbd-start", "slurmdbd", "-D"],
        "env": slurmdbd_env(db.host, db.port),
        "ports": [{"name": "slurmdbd", "containerPort": naming.SLURMDBD_PORT, "protocol": "TCP"}],
        # slurmdbd listens only after it has connected to the database.
        "readinessProbe": pods.tcp_readiness(naming.SLURMDBD_PORT),
        "startupProbe": pods.tcp_startup(naming.SLURMDBD_PORT),
        "securityContext": {"runAsUser": 0},
        "volumeMounts": [slurm_pod.slurm_etc_mount(), *slurm_pod.user_mounts(cluster)],
    }
    install_config = slurm_pod.install_config_container(cluster, config_mode="0600", users=users)
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
