"""slurmdbd.conf: where slurmdbd keeps accounting (it holds a password, so it goes in a Secret)."""

import re
from dataclasses import dataclass

from kubeslurm.api import SlurmCluster
from kubeslurm.render.config.templates import render_template
from kubeslurm.render.k8s import naming


@dataclass(frozen=True)
class DatabaseConnection:
    host: str
    port: int
    user: str
    database: str


def database_connection(cluster: SlurmCluster) -> DatabaseConnection:
    database = cluster.spec.accounting.database
    if database.external is not None:
        ext = database.external
        return DatabaseConnection(ext.host, ext.port, ext.user, ext.database)
    return DatabaseConnection(naming.database_address(cluster.metadata.name), naming.MARIADB_PORT, "slurm", "slurm_acct_db")


# Slurm's config parser reads `StoragePass=<value>` up to the first white space and then
# the next key=value pair of the same line; before that it cuts the line at '#', drops
# every '\\' (an escape) and treats a leading '"' as a quote. It has no way to quote a
# value that holds them, so such a password would reach slurmdbd changed, or add keys.
# Printable ASCII without those is what a password may hold (the operator generates
# URL-safe ones).
STORAGE_PASSWORD = re.compile(r'[!$-\[\]-~]+')
STORAGE_PASSWORD_HELP = (
    "one line of printable ASCII characters without space, '#', '\\' or '\"' (slurmdbd.conf cannot quote them)"
)


def storage_password_problem(password: str) -> str | None:
    """Why slurmdbd.conf cannot hold this database password, or None when it can."""
    if not password:
        return "the database password is empty"
    if not STORAGE_PASSWORD.fullmatch(password):
        # the message goes to status and Events: it names no character of the password
        return f"the database password must be {STORAGE_PASSWORD_HELP}"
    return None


def render_slurmdbd_conf(cluster: SlurmCluster, database_password: str) -> str:
    problem = storage_password_problem(database_password)
    if problem:
        raise ValueError(problem)
    db = database_connection(cluster)
    return render_template(
        "slurmdbd.conf.j2",
        namespace=cluster.metadata.namespace,
        cluster_name=cluster.metadata.name,
        port=naming.SLURMDBD_PORT,
        db={"host": db.host, "port": db.port, "user": db.user, "database": db.database, "password": database_password},
    )
