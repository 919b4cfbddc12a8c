"""Login pods (`<cluster>-login-N`): where researchers run sbatch, srun, squeue, sacct.

Pod layout: the daemon that holds the key and where researchers' sessions run are apart.
- init `install-config`: copies only the key into /etc/slurm, and gives /run/slurm to
  SlurmUser.
- `login` (the default container of `kubectl exec`): where sessions run, started by sshd
  (spec.login.ssh, on by default; `sleep infinity` without it). It has no Slurm key
  (whoever reads the key can forge any uid, root included): the client commands ask
  sackd over /run/slurm/sack.socket for their credentials and read the configs sackd
  fetched into /run/slurm/conf. allowPrivilegeEscalation: false sets no_new_privs, so
  setuid programs (su, sudo, passwd) give nobody root; root may still become a
  researcher (`runuser -l alice`), never the other way. sshd (root, so that it can become
  the user who logs in: setuid away from root is allowed under no_new_privs) takes keys
  only, never root or a password; its host key is the Secret `<cluster>-ssh-host-keys`,
  generated once by the operator, so every login pod presents the same one; the users'
  public keys come from the Secret spec.login.ssh.authorizedKeysSecret (one key per user),
  which the kubelet keeps current: a key added there works within a minute, no restart.
- `sackd`, as SlurmUser, `/usr/sbin/sackd -D --conf-server <slurmctld...>`, started once slurmctld
  listens (render/conf_server.py): fetches slurm.conf from slurmctld into
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

from kubeslurm.api import SlurmCluster
from kubeslurm.render import slurm_pod
from kubeslurm.render.conf_server import once_slurmctld_listens
from kubeslurm.render.k8s import labels, naming, pods
from kubeslurm.render.k8s.secrets import SSH_HOST_KEY_FILE
from kubeslurm.render.k8s.statefulset import stateful_set
from kubeslurm.render.sssd_pods import add_sssd, uses_directory

TERMINATION_GRACE_SECONDS = 30
SACKD = "/usr/sbin/sackd"
# The image's SlurmUser (Debian's fixed uid for slurm; images/slurm/setup.sh).
SLURM_UID = 64030
SESSIONS_CONTAINER = "login"
SSHD = "/usr/sbin/sshd"
SSS_SSH_AUTHORIZEDKEYS = "/usr/bin/sss_ssh_authorizedkeys"
# The image's unprivileged account (uid 65534): the keys command needs no right of its own.
AUTHORIZED_KEYS_COMMAND_USER = "nobody"
SSH_HOST_KEY_VOLUME = "ssh-host-key"
SSH_HOST_KEY_DIR = "/etc/ssh/kubeslurm-host-key"
AUTHORIZED_KEYS_VOLUME = "authorized-keys"
AUTHORIZED_KEYS_DIR = "/etc/ssh/kubeslurm-authorized-keys"
SACKD_CONTAINER = "sackd"
# sackd needs /run/slurm for its socket and config cache; the emptyDir is root's.
OWN_RUN_DIR = f"chown slurm:slurm {slurm_pod.SLURM_RUN}"


def sshd_command(cluster: SlurmCluster) -> list[str]:
    """sshd in the foreground, logging to stderr (kubectl logs), with what may never change
    pinned on its command line (sshd takes the first value it reads of an option, and the
    command line comes before any config file): keys only, never root, never a password.

    With the directory (spec.identity.mode ldap) keys come from it through SSSD
    (sss_ssh_authorizedkeys, run as the unprivileged `nobody`), and sshd uses PAM: its
    account phase (pam_sss) is where SSSD says who may log in (loginGroups/loginFilter)
    and whether the directory still knows the user, and its session phase makes a
    directory user's home at the first login (pam_mkhomedir, images/slurm/setup.sh):
    directory users are unknown when a pod starts, so no init container can make them.
    PAM never sees a password: sshd offers public keys only."""
    keys_secret = cluster.spec.login.ssh.authorized_keys_secret
    options = {
        "HostKey": f"{SSH_HOST_KEY_DIR}/{SSH_HOST_KEY_FILE}",
        "AuthorizedKeysFile": f"{AUTHORIZED_KEYS_DIR}/%u",
        "PermitRootLogin": "no",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        # Accounts of spec.accounts have no password or shadow entry, which PAM's account
        # phase refuses; sshd's own checks (and the keys) decide instead.
        "UsePAM": "no",
        # The keys are the operator's files (a Secret volume, which the kubelet keeps current
        # and whose directories sshd's ownership checks would refuse); nothing under a home
        # directory is read, so those checks protect nothing here.
        "StrictModes": "no",
        # OpenSSH >= 9.8 refuses for a while every connection from an address whose logins
        # failed. Behind the login Service (kube-proxy's SNAT, a load balancer) all users can
        # come from one address, so one user's wrong key could shut everyone out (suspected in
        # e2e: "Connection reset" right after the refused-logins test). Keys only: nothing to guess.
        "PerSourcePenalties": "no",
    }
    if uses_directory(cluster):
        options.update({
            "AuthorizedKeysFile": f"{AUTHORIZED_KEYS_DIR}/%u" if keys_secret else "none",
            "AuthorizedKeysCommand": f"{SSS_SSH_AUTHORIZEDKEYS} %u",
            "AuthorizedKeysCommandUser": AUTHORIZED_KEYS_COMMAND_USER,
            "UsePAM": "yes",
        })
    return [SSHD, "-D", "-e", *(arg for key, value in options.items() for arg in ("-o", f"{key}={value}"))]


def _ssh_volumes(cluster: SlurmCluster) -> list[dict]:
    ssh = cluster.spec.login.ssh
    volumes = [{
        "name": SSH_HOST_KEY_VOLUME,
        "secret": {"secretName": naming.ssh_host_key_secret(cluster.metadata.name), "defaultMode": 0o400},
    }]
    if ssh.authorized_keys_secret is not None:
        # Public keys: every user may read them, as sshd reads a user's file as that user.
        volumes.append({"name": AUTHORIZED_KEYS_VOLUME, "secret": {"secretName": ssh.authorized_keys_secret, "defaultMode": 0o444}})
    else:
        volumes.append(pods.empty_dir(AUTHORIZED_KEYS_VOLUME))
    return volumes


def login_stateful_set(cluster: SlurmCluster, *, users: slurm_pod.UnixUsers, sssd_hash: str | None = None) -> dict:
    """sssd_hash: sssd_pods.sssd_config_hash of the directory files, in ldap mode (spec.identity)."""
    name = cluster.metadata.name
    statefulset = naming.login_statefulset(name)
    pod_labels = labels.object_labels(name, labels.LOGIN)
    run_dir = {"name": slurm_pod.SLURM_RUN_VOLUME, "mountPath": slurm_pod.SLURM_RUN}
    ssh = cluster.spec.login.ssh.enabled
    sessions = {
        "name": SESSIONS_CONTAINER,
        **slurm_pod.image_fields(cluster),
        "command": sshd_command(cluster) if ssh else ["sleep", "infinity"],
        "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False},
        "volumeMounts": [dict(run_dir), *slurm_pod.user_mounts(cluster, shared=True)],
    }
    if ssh:
        sessions["ports"] = [{"name": "ssh", "containerPort": naming.SSH_PORT, "protocol": "TCP"}]
        sessions["readinessProbe"] = pods.tcp_readiness(naming.SSH_PORT)
        sessions["startupProbe"] = pods.tcp_startup(naming.SSH_PORT)
        sessions["volumeMounts"] += [
            {"name": SSH_HOST_KEY_VOLUME, "mountPath": SSH_HOST_KEY_DIR, "readOnly": True},
            {"name": AUTHORIZED_KEYS_VOLUME, "mountPath": AUTHORIZED_KEYS_DIR, "readOnly": True},
        ]
    sackd = {
        "name": SACKD_CONTAINER,
        **slurm_pod.image_fields(cluster),
        # once slurmctld listens: a first fetch before that makes sackd wait 10 s (conf_server.py)
        "command": once_slurmctld_listens(SACKD, ["-D", "--conf-server", naming.conf_server(name, cluster.spec.controller.backup)]),
        "ports": [{"name": "sackd", "containerPort": naming.SLURMD_PORT, "protocol": "TCP"}],
        # sackd opens its reconfigure port (SlurmdPort) only after it fetched the
        # configs and loaded the key, i.e. once sbatch and squeue work here.
        "readinessProbe": pods.tcp_readiness(naming.SLURMD_PORT),
        "startupProbe": pods.tcp_startup(naming.SLURMD_PORT),
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
            *(_ssh_volumes(cluster) if ssh else []),
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
        template=add_sssd(cluster, pods.pod_template(pod_labels, {}, spec), (SESSIONS_CONTAINER,), sssd_hash),
    )
