"""The internal accounting database: one MariaDB pod on a PVC (accounting.database.internal).

The MariaDB image contract (images/mariadb must match it; the official
`mariadb` image's entrypoint already does):
- started as root, it takes ownership of /var/lib/mysql (an empty PVC on first
  start), drops to its own user and runs mariadbd.
- on an empty data directory it creates database MARIADB_DATABASE and user
  MARIADB_USER (from any host) with the password in the file MARIADB_PASSWORD_FILE
  and all privileges on that database, gives root a random password
  (MARIADB_RANDOM_ROOT_PASSWORD=1), and listens on TCP 3306 only once that is done.
- arguments starting with `--` are passed to mariadbd.
- `mariadb-admin` is on PATH (the readiness probe).
The data claim is rendered twice on purpose: as the StatefulSet's volumeClaimTemplate
(its pod mounts `data-<cluster>-mariadb-0` by that name) and as an object of its own
owned by the SlurmCluster, so that turning accounting off, or moving to an external
database, prunes the StatefulSet but keeps years of accounting; turning it back on
finds the same data. Only deleting the SlurmCluster deletes the claim.
The password reaches the pod only as a file, mounted from the `<cluster>-mariadb-password`
Secret readable by root alone (the entrypoint reads it before mariadbd drops to user
mysql); it is read once, on the first start (an existing database keeps its password).
Not an environment variable: those are inherited by mariadbd and every process it
starts, and shown by /proc/<pid>/environ and `kubectl exec ... env`.
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.config.slurmdbd_conf import database_connection
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta
from kubeslurm.render.k8s.pods import pod_spec, pod_template, tcp_startup
from kubeslurm.render.k8s.secrets import DATABASE_PASSWORD_KEY
from kubeslurm.render.k8s.statefulset import persistent_volume_claim_spec, stateful_set

DATA_DIR = "/var/lib/mysql"
DATA_VOLUME = "data"
PASSWORD_VOLUME = "database-password"
PASSWORD_DIR = "/run/secrets/kubeslurm-database"
# InnoDB flushes and closes cleanly on SIGTERM; a kill here means crash recovery.
TERMINATION_GRACE_SECONDS = 120
# Slurm's accounting guide: slurmdbd's purges and upgrades hold locks for minutes.
MARIADB_ARGS = ["--innodb-lock-wait-timeout=900"]


def ping_check() -> dict:
    """A new dict each time: rendered objects share nothing mutable (test_render_cost)."""
    return {"exec": {"command": ["mariadb-admin", "--protocol=tcp", "--host=127.0.0.1", f"--port={naming.MARIADB_PORT}", "ping"]}}


def database_stateful_set(cluster: SlurmCluster) -> dict:
    internal = cluster.spec.accounting.database.internal
    if internal is None:
        raise ValueError(f"SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name} uses an external database")
    name = cluster.metadata.name
    statefulset = naming.database_statefulset(name)
    db = database_connection(cluster)
    pod_labels = labels.object_labels(name, labels.DATABASE)
    password_volume = {
        "name": PASSWORD_VOLUME,
        "secret": {
            "secretName": naming.database_password_secret(name),
            "items": [{"key": DATABASE_PASSWORD_KEY, "path": DATABASE_PASSWORD_KEY}],
            "defaultMode": 0o400,
        },
    }
    mariadb = {
        "name": "mariadb",
        "image": internal.image,
        "imagePullPolicy": cluster.spec.slurm.image_pull_policy,
        "args": list(MARIADB_ARGS),
        "env": [
            {"name": "MARIADB_DATABASE", "value": db.database},
            {"name": "MARIADB_USER", "value": db.user},
            {"name": "MARIADB_PASSWORD_FILE", "value": f"{PASSWORD_DIR}/{DATABASE_PASSWORD_KEY}"},
            {"name": "MARIADB_RANDOM_ROOT_PASSWORD", "value": "1"},
        ],
        "ports": [{"name": "mariadb", "containerPort": naming.MARIADB_PORT, "protocol": "TCP"}],
        # `ping` succeeds when the server answers the MySQL protocol, even with access
        # denied, so it needs no password; TCP is up only after initialisation.
        "readinessProbe": {**ping_check(), "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        # Until the first start: TCP, which mariadbd opens only after initialising (as above).
        # The kubelet connects itself, where an exec probe starts a process in the container each
        # second, CPU taken from the initialisation it waits for.
        "startupProbe": tcp_startup(naming.MARIADB_PORT),
        "volumeMounts": [
            {"name": DATA_VOLUME, "mountPath": DATA_DIR},
            {"name": PASSWORD_VOLUME, "mountPath": PASSWORD_DIR, "readOnly": True},
        ],
    }
    spec = pod_spec(
        init_containers=[], containers=[mariadb], volumes=[password_volume], termination_grace_seconds=TERMINATION_GRACE_SECONDS,
    )
    claim = {"metadata": {"name": DATA_VOLUME, "labels": pod_labels}, "spec": _data_claim_spec(cluster)}
    return stateful_set(
        name=statefulset,
        owner=cluster,
        object_labels=pod_labels,
        selector=labels.selector_labels(name, labels.DATABASE),
        service_name=statefulset,
        replicas=1,
        template=pod_template(pod_labels, {}, spec),
        volume_claim_templates=[claim],
    )


def _data_claim_spec(cluster: SlurmCluster) -> dict:
    internal = cluster.spec.accounting.database.internal
    return persistent_volume_claim_spec(internal.size, internal.storage_class_name, "ReadWriteOnce")


def database_data_claim(cluster: SlurmCluster) -> dict:
    """The database's claim as an object of the SlurmCluster's (see the module's docstring)."""
    name = cluster.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(naming.database_data_claim(name), cluster, labels.object_labels(name, labels.DATABASE)),
        "spec": _data_claim_spec(cluster),
    }


def database_network_policy(cluster: SlurmCluster) -> dict:
    """Only slurmdbd may reach the database: nothing else in the namespace (a job, a login
    session, another tenant's pod) gets to try the password or an exploit on port 3306.
    Enforced where the CNI implements NetworkPolicy (Calico, Cilium, ...); the local
    cluster's bridge CNI does not, so there it is a statement of intent."""
    name = cluster.metadata.name
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(naming.database_statefulset(name), cluster, labels.object_labels(name, labels.DATABASE)),
        "spec": {
            "podSelector": {"matchLabels": labels.selector_labels(name, labels.DATABASE)},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": labels.selector_labels(name, labels.ACCOUNTING)}}],
                "ports": [{"protocol": "TCP", "port": naming.MARIADB_PORT}],
            }],
        },
    }
