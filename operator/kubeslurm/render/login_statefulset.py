"""Login pods (`<cluster>-login-N`): where researchers run sbatch, srun, squeue, sacct.

Pod layout: the daemon that holds the key and where researchers' sessions run are apart.
- init `install-config`: copies only the key into /etc/slurm, and gives /run/slurm to
  SlurmUser.
- `login` (the default container of `kubectl exec`): where sessions run. It has no key
  (whoever reads the key can forge any uid, root included): the client commands ask
  sackd over /run/slurm/sack.socket for their credentials and read the configs sackd
  fetched into /run/slurm/conf. allowPrivilegeEscalation: false sets no_new_privs, so
  setuid programs (su, sudo, passwd) give nobody root; root may still become a
  researcher (`runuser -l alice`), never the other way.
- `sackd`, as SlurmUser, `/usr/sbin/sackd -D --conf-server <slurmctld...>`: fetches slurm.conf from slurmctld into
  /run/slurm/conf (configless; no ConfigMap mount), where the client commands find
  it, and serves auth/slurm credentials to them over /run/slurm/sack.socket. It is
  told of new configs by slurmctld after `scontrol reconfigure`, so a config change
  never restarts a login pod (no config-hash annotation).
  On that reconfigure sackd 24.11 re-executes itself with execve(argv[0]) (no PATH
  search, hence the absolute path) and, with -D (accepted, though its usage text
  omits it), does so in place: the container's main process keeps its PID. With
  --systemd it would fork a new sackd and exit, ending the container at every
  reconfigure (seen in the real-Slurm tier: "Relinquishing control to new sackd process").
  It runs as SlurmUser because slurmctld's config push is signed for SlurmUser: a root
  sackd refuses it ("asked to verify token with r_uid=64030 for uid=0, rejecting") and
  would never see a config change until its pod restarts.
"""

from ..api import SlurmCluster
from . import labels, naming, pods, slurm_pod
from .stateful_set import stateful_set

TERMINATION_GRACE_SECONDS = 30
SACKD = "/usr/sbin/sackd"
# The image's SlurmUser (Debian's fixed uid for slurm; images/slurm/setup.sh).
SLURM_UID = 64030
SESSIONS_CONTAINER = "login"
SACKD_CONTAINER = "sackd"
# sackd needs /run/slurm for its socket and config cache; the emptyDir is root's.
OWN_RUN_DIR = f"chown slurm:slurm {slurm_pod.SLURM_RUN}"


def login_stateful_set(cluster: SlurmCluster, *, users: slurm_pod.UnixUsers) -> dict:
    name = cluster.metadata.name
    statefulset = naming.login_statefulset(name)
    pod_labels = labels.object_labels(name, labels.LOGIN)
    run_dir = {"name": slurm_pod.SLURM_RUN_VOLUME, "mountPath": slurm_pod.SLURM_RUN}
    sessions = {
        "name": SESSIONS_CONTAINER,
        **slurm_pod.image_fields(cluster),
        "command": ["sleep", "infinity"],
        "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False},
        "volumeMounts": [dict(run_dir), *slurm_pod.user_mounts(cluster, shared=True)],
    }
    sackd = {
        "name": SACKD_CONTAINER,
        **slurm_pod.image_fields(cluster),
        "command": [SACKD, "-D", "--conf-server", naming.conf_server(name, cluster.spec.controller.backup)],
        "ports": [{"name": "sackd", "containerPort": naming.SLURMD_PORT, "protocol": "TCP"}],
        # sackd opens its reconfigure port (SlurmdPort) only after it fetched the
        # configs and loaded the key, i.e. once sbatch and squeue work here.
        "readinessProbe": pods.tcp_readiness(naming.SLURMD_PORT),
        # as SlurmUser it needs no capability at all
        "securityContext": {
            "runAsUser": SLURM_UID, "runAsGroup": SLURM_UID, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [slurm_pod.slurm_etc_mount(), dict(run_dir)],
    }
    spec = pods.pod_spec(
        init_containers=[slurm_pod.install_config_container(
            cluster, config_mode=None, users=users, prepare=[OWN_RUN_DIR], mounts=[dict(run_dir)], shared=True,
        )],
        containers=[sessions, sackd],
        volumes=[
            pods.empty_dir(slurm_pod.SLURM_ETC_VOLUME),
            slurm_pod.key_volume(cluster),
            pods.empty_dir(slurm_pod.SLURM_RUN_VOLUME),
            *slurm_pod.user_volumes(cluster, shared=True),
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
