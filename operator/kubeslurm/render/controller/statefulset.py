"""slurmctld: one pod, or two with `controller.backup` (pod 0 primary, pod 1 backup).

Pod layout:
- init `install-config`: copies slurm.conf, gres.conf, cgroup.conf (topology.conf)
  from the ConfigMap and the key from its Secret into /etc/slurm (owner slurm), and
  gives the state PVC to user slurm.
- `slurmctld -D -i` (on a first start with accounting, once slurmdbd listens: see
  FIRST_START_WAITS_FOR_ACCOUNTING): foreground; -i starts even when the state files are missing or
  unreadable (the first start, or a state from an older layout) instead of exiting.
- /var/spool/slurmctld is the state PVC (StateSaveLocation in slurm.conf).

The pod template carries the hash of the ConfigMap data: a config change rolls the
controller (its state is on the PVC, running jobs keep running on slurmd), after
which the operator runs `scontrol reconfigure` so configless slurmd pods fetch it.

With a backup (Slurm 24.11; the e2e story's failover chapter checks the first two): the
backup takes over once the primary has not answered for SlurmctldTimeout (see
slurm_conf.BACKUP_TUNABLES) and its heartbeat file on the shared claim stopped changing;
a primary that starts takes control back at once (it asks the backup to save state and
return to standby), so pod 0 is the one in control whenever it runs. Hence, from
Slurm's source rather than a test here, `scontrol takeover` hands control over only for
as long as the primary stays down: its slurmctld exits on the backup's request, and the
kubelet restarts it, which takes control back. Both pods count as ready once their port
is open: slurmctld listens from its start, also as a standby backup.
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render import slurm_pod
from kubeslurm.render.k8s import labels, naming, pods
from kubeslurm.render.k8s.config_hash import CONFIG_HASH_ANNOTATION, config_hash
from kubeslurm.render.k8s.statefulset import stateful_set
from kubeslurm.render.sssd_pods import add_sssd

STATE_SAVE_LOCATION = "/var/spool/slurmctld"
STATE_VOLUME = "state"
# slurmctld writes its whole state on SIGTERM; large queues take a while.
TERMINATION_GRACE_SECONDS = 120
HOSTNAME_TOPOLOGY_KEY = "kubernetes.io/hostname"
# On its first start (no `clustername` file in its state yet) slurmctld 24.11 neither listens nor
# serves configs until slurmdbd has given it a ClusterID, and it asks slurmdbd again only every
# 2 s ("Still don't know my ClusterID"); slurmdbd itself waits for a fresh database. Polling
# slurmdbd's port every 0.2 s and starting slurmctld once it answers puts the controller, and the
# slurmd pods waiting for it, on the chain's critical path without that 2 s step. A slurmctld with
# a state knows its ClusterID and starts at once (it serves with slurmdbd down, reading its state
# files): a failover must not wait for accounting. Bounded: after ACCOUNTING_WAIT_SECONDS
# slurmctld starts anyway and retries on its own. Host and port come as arguments ($1, $2).
ACCOUNTING_WAIT_SECONDS = 300
FIRST_START_WAITS_FOR_ACCOUNTING = (
    'host=$1; port=$2; shift 2; '
    f'if [ ! -e {STATE_SAVE_LOCATION}/clustername ]; then '
    'tries=0; '
    """until timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null """
    f'|| [ $tries -ge {ACCOUNTING_WAIT_SECONDS * 5} ]; do '
    'if [ $((tries % 150)) -eq 0 ]; then echo "kubeslurm: first start: waiting for slurmdbd at $host:$port to listen" >&2; fi; '
    'sleep 0.2; tries=$((tries + 1)); done; fi; '
    'exec slurmctld "$@"'
)


def _apart(selector: dict[str, str]) -> dict:
    """Primary and backup on different Kubernetes nodes where there is room: a backup on the
    primary's node is lost with it, which is the failure a backup is for. Preferred, not
    required: a one-node cluster still runs both (the backup then covers slurmctld crashes)."""
    term = {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": HOSTNAME_TOPOLOGY_KEY}
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}}


def controller_stateful_set(
    cluster: SlurmCluster, config_files: dict[str, str], *, users: slurm_pod.UnixUsers, sssd_hash: str | None = None
) -> dict:
    """sssd_hash: sssd_pods.sssd_config_hash of the directory files, in ldap mode (spec.identity)."""
    name = cluster.metadata.name
    statefulset = naming.controller_statefulset(name)
    pod_labels = labels.object_labels(name, labels.CONTROLLER)
    state_mount = {"name": STATE_VOLUME, "mountPath": STATE_SAVE_LOCATION}
    init = slurm_pod.install_config_container(
        cluster,
        config_mode="0644",
        users=users,
        # The claim's root directory is root-owned; slurmctld runs as slurm.
        prepare=[f"chown slurm:slurm {STATE_SAVE_LOCATION}", f"chmod 0700 {STATE_SAVE_LOCATION}"],
        mounts=[state_mount],
    )
    if cluster.spec.accounting.enabled:
        command = ["/bin/sh", "-c", FIRST_START_WAITS_FOR_ACCOUNTING, "slurmctld",
                   naming.accounting_address(name), str(naming.SLURMDBD_PORT), "-D", "-i"]
    else:
        command = ["slurmctld", "-D", "-i"]
    slurmctld = {
        "name": "slurmctld",
        **slurm_pod.image_fields(cluster),
        "command": command,
        "ports": [{"name": "slurmctld", "containerPort": naming.SLURMCTLD_PORT, "protocol": "TCP"}],
        # The port opens once the state is loaded and RPCs are served. No liveness
        # probe: a busy slurmctld still accepts connections, a dead one exits.
        "readinessProbe": pods.tcp_readiness(naming.SLURMCTLD_PORT),
        "startupProbe": pods.tcp_startup(naming.SLURMCTLD_PORT),
        "securityContext": {"runAsUser": 0},
        "volumeMounts": [slurm_pod.slurm_etc_mount(), state_mount, *slurm_pod.user_mounts(cluster)],
    }
    spec = pods.pod_spec(
        init_containers=[init],
        containers=[slurmctld],
        volumes=[
            pods.empty_dir(slurm_pod.SLURM_ETC_VOLUME),
            slurm_pod.config_map_volume(naming.config_map(name)),
            slurm_pod.key_volume(cluster),
            {"name": STATE_VOLUME, "persistentVolumeClaim": {"claimName": naming.controller_state_claim(name)}},
            *slurm_pod.user_volumes(cluster),
        ],
        termination_grace_seconds=TERMINATION_GRACE_SECONDS,
    )
    selector = labels.selector_labels(name, labels.CONTROLLER)
    if cluster.spec.controller.backup:
        spec["affinity"] = _apart(selector)
    template = pods.pod_template(pod_labels, {CONFIG_HASH_ANNOTATION: config_hash(config_files)}, spec)
    add_sssd(cluster, template, ("slurmctld",), sssd_hash)
    return stateful_set(
        name=statefulset,
        owner=cluster,
        object_labels=pod_labels,
        selector=selector,
        service_name=statefulset,
        replicas=len(naming.controller_hosts(name, cluster.spec.controller.backup)),
        template=template,
    )
