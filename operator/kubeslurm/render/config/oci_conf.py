"""oci.conf: how slurmd runs `srun --container=<bundle>` (spec.slurm.containers).

Slurm calls the runtime as the job's user, never as root, so the runtime must run
rootless: crun (Debian's, in the Slurm image) with `--rootless=true`, a state
directory per uid, and no cgroup manager of its own (in a pod the cgroup tree is the
kubelet's; Slurm's task/cgroup confines the step when constrainWithCgroups is set).
The container id names node, user, job, step and task, so two steps never collide.
`crun run` goes through the image's /usr/libexec/kubeslurm/oci-run (images/slurm/setup.sh):
in a pod the kernel refuses a rootless container a fresh /proc (the runtime masks parts of
the pod's), so the wrapper binds the step's /proc into it instead.
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.config.templates import render_template

# Slurm's OCI patterns: %b bundle path, %n node, %u user name, %U uid, %j job, %s step, %t task.
CRUN = "crun --rootless=true --cgroup-manager=disabled --root=/tmp/kubeslurm-crun-%U"
CONTAINER_ID = "%n.%u.%j.%s.%t"
OCI_RUN = "/usr/libexec/kubeslurm/oci-run"
RUNTIME_COMMANDS = (
    ("RunTimeQuery", f"{CRUN} state {CONTAINER_ID}"),
    ("RunTimeKill", f"{CRUN} kill -a {CONTAINER_ID}"),
    ("RunTimeDelete", f"{CRUN} delete --force {CONTAINER_ID}"),
    # the image's wrapper around `crun run` (images/slurm/setup.sh): /proc bound, not mounted
    ("RunTimeRun", f"{OCI_RUN} %b {CONTAINER_ID}"),
)


def render_oci_conf(cluster: SlurmCluster) -> str | None:
    """None when the cluster runs no containers (no oci.conf: `--container` is then refused)."""
    if not cluster.spec.slurm.containers:
        return None
    return render_template(
        "oci.conf.j2",
        namespace=cluster.metadata.namespace,
        cluster_name=cluster.metadata.name,
        commands=RUNTIME_COMMANDS,
    )
