"""SSSD in every Slurm pod of a cluster in ldap mode (spec.identity.mode: ldap).

login, slurmctld, slurmd and slurmdbd pods each run sssd, so `getent passwd alice`,
`id alice` and the groups of every job agree everywhere: slurmctld maps job uids to
users and accounts, slurmd starts jobs as their users, sshd in the login pods asks
`sss_ssh_authorizedkeys` for keys and PAM's account phase for who may log in.

Pod layout:
- `sssd` is a sidecar (an init container with restartPolicy Always): the kubelet starts
  the pod's own containers only once its startup probe has seen sssd's nss socket, so
  sshd and slurmd never run a minute without users. It installs sssd.conf (mode 0600,
  root: sssd refuses anything others may read) and the CA certificate from the Secret
  `<cluster>-sssd` into an emptyDir at /etc/sssd, then runs `sssd -i` logging to
  stderr (`kubectl logs <pod> -c sssd`). Its cache (/var/lib/sss/db) is an emptyDir:
  a replaced pod asks the directory again. The command holds no value of the spec.
- The containers that look users up (CLIENT_MOUNTS) mount sssd's sockets
  (/var/lib/sss/pipes) and its in-memory cache (/var/lib/sss/mc) read-only: nss_sss
  (nsswitch `files sss` in the image) and pam_sss find sssd there. emptyDirs are made
  mode 0777, and a researcher able to replace a socket there could answer root's
  lookups, so the sidecar sets both to 0755 before sssd starts and the clients cannot
  write there anyway (connecting to a socket needs no write access to its file system).
- Every such pod template carries a keyed hash of sssd.conf and the CA
  (SSSD_CONFIG_HASH_ANNOTATION; keyed: sssd.conf holds the bind password), so a changed
  directory setting rolls the controller, accounting and login pods. slurmd pods follow
  their NodeSet's updateStrategy: with OnDelete (the default) a running slurmd keeps its
  sssd.conf until the pod is replaced, as it would keep running jobs.
"""

from kubeslurm.api import SlurmCluster
from kubeslurm.render.config.sssd_conf import CA_CERT_FILE, CA_CERT_PATH, SSSD_COMMAND, SSSD_CONF_FILE, SSSD_CONF_MODE, SSSD_CONF_PATH
from kubeslurm.render.k8s import naming, pods
from kubeslurm.render.k8s.config_hash import keyed_config_hash

SSSD_CONTAINER = "sssd"
SSSD_CONFIG_HASH_ANNOTATION = "kubeslurm.io/sssd-config-hash"
SSSD_SECRET_VOLUME = "sssd-config"
SSSD_SECRET_MOUNT = "/etc/sssd-secret"
SSSD_ETC_VOLUME = "sssd-etc"
SSSD_DB_VOLUME = "sssd-db"
SSSD_PIPES_VOLUME = "sssd-pipes"
SSSD_MC_VOLUME = "sssd-mc"
SSSD_PIPES = "/var/lib/sss/pipes"
SSSD_MC = "/var/lib/sss/mc"
NSS_SOCKET = f"{SSSD_PIPES}/nss"
# sssd's own processes; Guaranteed QoS of slurmd pods needs requests = limits here too.
SSSD_RESOURCES = {"cpu": "100m", "memory": "128Mi"}


def uses_directory(cluster: SlurmCluster) -> bool:
    return cluster.spec.identity.mode == "ldap"


def sssd_config_hash(files: dict[str, str], config_hash_key: bytes) -> str:
    """The annotation's value: keyed, since sssd.conf may hold the bind password."""
    return keyed_config_hash(files, config_hash_key)


def _start_script() -> str:
    return "\n".join([
        "set -eu",
        # emptyDirs come as 0777: nobody but root may place a socket or cache file here.
        f"chmod 0755 {SSSD_PIPES} {SSSD_MC}",
        # the responders' private sockets: the image has this directory, the emptyDir over pipes does not
        f"install -d -o root -g root -m 0750 {SSSD_PIPES}/private",
        f"install -o root -g root -m {SSSD_CONF_MODE:04o} {SSSD_SECRET_MOUNT}/{SSSD_CONF_FILE} {SSSD_CONF_PATH}",
        f"install -o root -g root -m 0644 {SSSD_SECRET_MOUNT}/{CA_CERT_FILE} {CA_CERT_PATH}",
        # a restarted sidecar finds its previous pid file gone (new container) but its sockets kept
        f"rm -f {SSSD_PIPES}/nss {SSSD_PIPES}/pam {SSSD_PIPES}/ssh",
        f"exec {' '.join(SSSD_COMMAND)}",
    ])


def sssd_container(cluster: SlurmCluster) -> dict:
    """The sidecar (an init container with restartPolicy Always)."""
    return {
        "name": SSSD_CONTAINER,
        "image": cluster.spec.slurm.image,
        "imagePullPolicy": cluster.spec.slurm.image_pull_policy,
        "restartPolicy": "Always",
        "command": ["/bin/sh", "-c", _start_script()],
        # sssd runs as root (it reads the root-only sssd.conf and serves every user); it needs
        # no capability beyond the runtime's default set and never gains one.
        "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False},
        "startupProbe": {
            "exec": {"command": ["test", "-S", NSS_SOCKET]},
            "periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": 120,
        },
        "resources": {"requests": dict(SSSD_RESOURCES), "limits": dict(SSSD_RESOURCES)},
        "volumeMounts": [
            {"name": SSSD_SECRET_VOLUME, "mountPath": SSSD_SECRET_MOUNT, "readOnly": True},
            {"name": SSSD_ETC_VOLUME, "mountPath": "/etc/sssd"},
            {"name": SSSD_DB_VOLUME, "mountPath": "/var/lib/sss/db"},
            {"name": SSSD_PIPES_VOLUME, "mountPath": SSSD_PIPES},
            {"name": SSSD_MC_VOLUME, "mountPath": SSSD_MC},
        ],
    }


def sssd_volumes(cluster: SlurmCluster) -> list[dict]:
    return [
        {"name": SSSD_SECRET_VOLUME, "secret": {"secretName": naming.sssd_secret(cluster.metadata.name), "defaultMode": 0o400}},
        pods.empty_dir(SSSD_ETC_VOLUME),
        pods.empty_dir(SSSD_DB_VOLUME),
        pods.empty_dir(SSSD_PIPES_VOLUME),
        pods.empty_dir(SSSD_MC_VOLUME),
    ]


def client_mounts() -> list[dict]:
    """What a container that looks users up mounts: sssd's sockets and memory cache, read-only."""
    return [
        {"name": SSSD_PIPES_VOLUME, "mountPath": SSSD_PIPES, "readOnly": True},
        {"name": SSSD_MC_VOLUME, "mountPath": SSSD_MC, "readOnly": True},
    ]


def add_sssd(cluster: SlurmCluster, template: dict, clients: tuple[str, ...], config_hash: str | None) -> dict:
    """`template` (a pod template) with sssd for the containers named `clients`; unchanged in local mode.

    config_hash: sssd_config_hash of the Secret's files, required in ldap mode."""
    if not uses_directory(cluster):
        return template
    if config_hash is None:
        raise ValueError(
            f"SlurmCluster {cluster.metadata.name} reads users from the directory: pass the hash of its sssd files"
        )
    spec = template["spec"]
    spec["initContainers"] = [*spec.get("initContainers", []), sssd_container(cluster)]
    spec["volumes"] = [*spec.get("volumes", []), *sssd_volumes(cluster)]
    for container in spec["containers"]:
        if container["name"] in clients:
            container["volumeMounts"] = [*container.get("volumeMounts", []), *client_mounts()]
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[SSSD_CONFIG_HASH_ANNOTATION] = config_hash
    template["metadata"]["annotations"] = dict(sorted(annotations.items()))
    return template
