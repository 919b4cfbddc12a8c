"""slurmdbd.conf: where slurmdbd keeps accounting (it holds a password, so it goes in a Secret)."""

from dataclasses import dataclass

from ..api import SlurmCluster
from . import naming
from .templates import render_template


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


def render_slurmdbd_conf(cluster: SlurmCluster, database_password: str) -> str:
    if any(c in database_password for c in "\n\r#"):
        raise ValueError("the database password must be one line without '#': slurmdbd.conf cannot quote it")
    db = database_connection(cluster)
    return render_template(
        "slurmdbd.conf.j2",
        namespace=cluster.metadata.namespace,
        cluster_name=cluster.metadata.name,
        port=naming.SLURMDBD_PORT,
        db={"host": db.host, "port": db.port, "user": db.user, "database": db.database, "password": database_password},
    )
