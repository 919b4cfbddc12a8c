"""What every Slurm pod shares: the image, the auth key, the config copy at start.

The Slurm image contract (images/slurm must match it):
- Debian's Slurm packages: slurmctld, slurmd, slurmdbd, sackd, slurm-client (scontrol),
  built with sysconfdir /etc/slurm, so /etc/slurm/slurm.key is the key's default
  location, which is also where configless slurmd and sackd look for it.
- a user and group `slurm` (SlurmUser); containers start as root (uid 0) and the
  daemons drop to `slurm` themselves (slurmctld, slurmdbd) or must stay root (slurmd
  starts jobs as their users).
- /bin/sh, coreutils (`install`, `chown`, `chmod`, `timeout`) on PATH.
- nothing under /etc/slurm that matters: an emptyDir is mounted over it.
- /run/slurmctld and /run/slurmdbd owned by slurm (systemd makes them on a host; the
  daemons exit without them: "fatal: _prepare_run_dir: failed to create /run/slurmdbd").

ConfigMap and Secret volumes are root-owned and read-only, but Slurm wants its key
owned by SlurmUser with mode 0600 (and slurmdbd.conf likewise). So an init container
(same image) copies the mounted files from /etc/slurm-config and /etc/slurm-key into
an emptyDir at /etc/slurm with the owner and mode each daemon expects.

Unix users of spec.accounts: slurmctld maps job uids to accounts, slurmd starts jobs as
their users and researchers log in as them, so every Slurm pod must know them, with the
same uid everywhere. An image or directory service (nsswitch) that already knows a name
wins (`getent`); for the others (listed in the ConfigMap <cluster>-unix-users, not in the pod
template, whose size would grow with them) the init container writes /etc/passwd and /etc/group
(the image's plus one line each) into an emptyDir that the daemon container mounts over
both files, and makes <home>/<user> (mode 0700, only where none exists) on the home:
the shared home of spec.storage in login and slurmd pods (render/shared_storage.py),
an emptyDir of the pod's own otherwise (slurmctld and slurmdbd never open users' files;
without spec.storage.home a job's files stay in its pod). The uids come from the
cluster's recorded assignment (render/unix_ids.py: a user keeps its uid forever, two
users never share one), so pods rendered at different times agree. Sites with
a directory service should ship it in the image: these are local accounts without
passwords, enough for `su`/`kubectl exec` and for Slurm. In ldap mode (spec.identity) none
of this happens: SSSD in every pod answers from the directory (render/sssd_pods.py).
"""

import hashlib
from collections.abc import Mapping, Sequence
from functools import lru_cache

from kubeslurm.api import SlurmCluster
from kubeslurm.render.k8s import labels, naming
from kubeslurm.render.k8s.metadata import object_meta
from kubeslurm.render.k8s.secrets import AUTH_KEY_FILE
from kubeslurm.render.shared_storage import HOME_VOLUME, has_shared_home, shared_mounts, shared_pod_volumes, storage_setup_script
from kubeslurm.render.unix_ids import FIRST_UID, UID_SLOTS, uids_of_users

__all__ = ["FIRST_UID", "UID_SLOTS", "UnixUsers", "account_users", "install_config_container", "unix_users"]

SLURM_ETC = "/etc/slurm"
CONFIG_MOUNT = "/etc/slurm-config"
KEY_MOUNT = "/etc/slurm-key"
SLURM_RUN = "/run/slurm"

SLURM_ETC_VOLUME = "slurm-etc"
CONFIG_VOLUME = "slurm-config"
KEY_VOLUME = "slurm-key"
SLURM_RUN_VOLUME = "slurm-run"

USERS_VOLUME = "unix-users"
USERS_DIR = "/etc/kubeslurm-users"

INSTALL_CONFIG_CONTAINER = "install-config"
# Requests equal limits so the init container never costs a slurmd pod its Guaranteed QoS.
INIT_RESOURCES = {"cpu": "100m", "memory": "64Mi"}


def image_fields(cluster: SlurmCluster) -> dict:
    return {"image": cluster.spec.slurm.image, "imagePullPolicy": cluster.spec.slurm.image_pull_policy}


def key_volume(cluster: SlurmCluster) -> dict:
    return {
        "name": KEY_VOLUME,
        "secret": {
            "secretName": naming.auth_key_secret(cluster.metadata.name),
            "items": [{"key": AUTH_KEY_FILE, "path": AUTH_KEY_FILE}],
            "defaultMode": 0o400,
        },
    }


def config_map_volume(config_map: str) -> dict:
    return {"name": CONFIG_VOLUME, "configMap": {"name": config_map, "defaultMode": 0o444}}


def secret_config_volume(secret: str) -> dict:
    return {"name": CONFIG_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o400}}


def slurm_etc_mount(read_only: bool = True) -> dict:
    # readOnly is left out rather than false: the API server drops false values of
    # such fields, and a drift check would then see a difference on every run.
    mount = {"name": SLURM_ETC_VOLUME, "mountPath": SLURM_ETC}
    if read_only:
        mount["readOnly"] = True
    return mount


# The account users of a cluster with their uids, sorted by name: resolved once per render
# from the recorded assignment and handed to every pod template (and the caches' key).
UnixUsers = tuple[tuple[str, int], ...]


def _names_users(cluster: SlurmCluster) -> bool:
    """Whether the pods make local users: those of spec.accounts in local mode. In ldap mode
    (spec.identity) the directory, through SSSD (render/sssd_pods.py), knows every user, and
    directory users get their homes at their first ssh login (login_statefulset.sshd_command)."""
    return cluster.spec.identity.mode == "local" and any(account.users for account in cluster.spec.accounts)


def unix_users(cluster: SlurmCluster, unix_ids: Mapping[str, int] | None = None) -> UnixUsers:
    """Every user of spec.accounts with its uid (= gid of its own group), sorted by name.

    unix_ids: the cluster's recorded assignment (status.unixIds); users it lacks get the
    uid unix_ids.assign_unix_ids would give them. None: the assignment for the spec alone.
    """
    if not _names_users(cluster):
        return ()
    return uids_of_users((user for account in cluster.spec.accounts for user in account.users), unix_ids)


def account_users(cluster: SlurmCluster, unix_ids: Mapping[str, int] | None = None) -> dict[str, int]:
    """`unix_users` as a dict: user name -> uid."""
    return dict(unix_users(cluster, unix_ids))


# The users live in a ConfigMap (unix_users_config_map), one line each, read by the
# install-config container: in the pod template they would make every pod of a cluster with
# 1000 users about 280 kB (each list of 1000 pods 280 MB, and past about 5000 users a template
# over etcd's 1.5 MB object limit). The template names the table's digest, so a change of
# users still changes the template and the pods restart with the new table.
# A few cache entries cover the clusters one operator reconciles in turn.
_USER_CACHE_SIZE = 16
USERS_TABLE_VOLUME = "unix-users-table"
USERS_TABLE_MOUNT = "/etc/kubeslurm-unix-users"
USERS_TABLE_FILE = "users"


@lru_cache(maxsize=_USER_CACHE_SIZE)
def users_table(users: UnixUsers) -> str:
    """`<name> <uid>` per line (uid = gid of the user's own group), sorted by name."""
    return "".join(f"{name} {uid}\n" for name, uid in users)


@lru_cache(maxsize=_USER_CACHE_SIZE)
def users_digest(users: UnixUsers) -> str:
    return table_digest(users_table(users))


def table_digest(table: str) -> str:
    """What the pod templates name of a users table (the ConfigMap's data)."""
    return hashlib.sha256(table.encode()).hexdigest()[:16]


def unix_users_config_map(cluster: SlurmCluster, users: UnixUsers) -> dict:
    """The table of `users_table`, for the pods of `user_volumes`."""
    name = cluster.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(naming.unix_users_config_map(name), cluster, labels.object_labels(name, None)),
        "data": {USERS_TABLE_FILE: users_table(users)},
    }


def _users_script(home_dir: str, make_homes: bool, digest: str) -> list[str]:
    """The init container's shell lines that add the table's users (and make their homes).

    A home is made only where none exists: on a shared home it holds the user's files, and
    changing its owner or mode at every pod start would undo what the user chose. Names in
    the table are validated Unix names ([a-z_][a-z0-9_-]*), uids numbers, home_dir a validated
    path of [A-Za-z0-9_.@+=,-] components; quoted all the same."""
    home = f"{home_dir}/$name"
    lines = [
        f"# the users of table {digest} ({USERS_TABLE_MOUNT}/{USERS_TABLE_FILE})",
        f"cp /etc/passwd /etc/group {USERS_DIR}/",
        "while read -r name uid; do",
        '  getent passwd "$name" >/dev/null && continue',
        f'  echo "$name:x:$uid:$uid:kubeslurm account user:{home}:/bin/bash" >> {USERS_DIR}/passwd',
        f'  echo "$name:x:$uid:" >> {USERS_DIR}/group',
    ]
    if make_homes:
        lines.append(f'  [ -e "{home}" ] || install -d -o "$uid" -g "$uid" -m 0700 "{home}"')
    lines += [f"done < {USERS_TABLE_MOUNT}/{USERS_TABLE_FILE}", f"chmod 0644 {USERS_DIR}/passwd {USERS_DIR}/group"]
    return lines


def _own_home(cluster: SlurmCluster, shared: bool) -> bool:
    """The pod gets an emptyDir home of its own: not when it mounts the shared home."""
    return _names_users(cluster) and not (shared and has_shared_home(cluster))


def user_volumes(cluster: SlurmCluster, *, shared: bool = False) -> list[dict]:
    """The volumes behind `user_mounts`.

    shared: the pod is one where researchers' files are read or written (login, slurmd):
    it mounts spec.storage, whose home (if any) replaces the pod's own emptyDir home."""
    volumes = []
    if _names_users(cluster):
        volumes += [
            {"name": USERS_VOLUME, "emptyDir": {}},
            {"name": USERS_TABLE_VOLUME,
             "configMap": {"name": naming.unix_users_config_map(cluster.metadata.name), "defaultMode": 0o444}},
        ]
    if _own_home(cluster, shared):
        volumes.append({"name": HOME_VOLUME, "emptyDir": {}})
    return volumes + (shared_pod_volumes(cluster) if shared else [])


def user_mounts(cluster: SlurmCluster, *, shared: bool = False) -> list[dict]:
    """Mounts of a daemon container that make the accounts' users (and, if shared, spec.storage) exist there."""
    mounts = []
    if _names_users(cluster):
        mounts += [
            {"name": USERS_VOLUME, "mountPath": "/etc/passwd", "subPath": "passwd", "readOnly": True},
            {"name": USERS_VOLUME, "mountPath": "/etc/group", "subPath": "group", "readOnly": True},
        ]
    if _own_home(cluster, shared):
        mounts.append({"name": HOME_VOLUME, "mountPath": cluster.spec.storage.home_path})
    return mounts + (shared_mounts(cluster) if shared else [])


def install_config_container(
    cluster: SlurmCluster,
    *,
    config_mode: str | None,
    users: UnixUsers,
    prepare: Sequence[str] = (),
    mounts: Sequence[dict] = (),
    shared: bool = False,
) -> dict:
    """Copy the key (and, if config_mode, every file of /etc/slurm-config) into /etc/slurm.

    `users`: the cluster's `unix_users`, added to /etc/passwd and /etc/group, with homes.
    `prepare`: more shell lines run as root before the daemon starts (e.g. owning a PVC).
    `shared`: the pod mounts spec.storage (see user_volumes); fresh claims the operator
    made are prepared (storage_setup_script) and homes made on the shared home.
    """
    volume_mounts = [
        slurm_etc_mount(read_only=False),
        {"name": KEY_VOLUME, "mountPath": KEY_MOUNT, "readOnly": True},
    ]
    if config_mode is not None:
        volume_mounts.append({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT, "readOnly": True})
    home_dir = cluster.spec.storage.home_path
    shared_home = shared and has_shared_home(cluster)
    if users:
        volume_mounts += [{"name": USERS_VOLUME, "mountPath": USERS_DIR},
                          {"name": USERS_TABLE_VOLUME, "mountPath": USERS_TABLE_MOUNT, "readOnly": True}]
        if not shared_home:
            volume_mounts.append({"name": HOME_VOLUME, "mountPath": home_dir})
    setup: tuple[str, ...] = ()
    if shared:
        volume_mounts += [m for m in shared_mounts(cluster) if not m.get("readOnly")]
        setup = tuple(storage_setup_script(cluster))
    make_homes = not shared_home or cluster.spec.storage.home.make_user_homes
    return {
        "name": INSTALL_CONFIG_CONTAINER,
        **image_fields(cluster),
        "command": ["/bin/sh", "-c", _install_script(config_mode, setup, tuple(prepare), users_digest(users) if users else None,
                                                     home_dir, make_homes)],
        "securityContext": {"runAsUser": 0},
        "resources": {"requests": dict(INIT_RESOURCES), "limits": dict(INIT_RESOURCES)},
        "volumeMounts": volume_mounts + list(mounts),
    }


# The slurmd pods of all NodeSets share one string rather than joining a copy each. Each
# cluster has a few variants (controller, accounting, login and slurmd differ in config_mode
# and prepare).
@lru_cache(maxsize=4 * _USER_CACHE_SIZE)
def _install_script(
    config_mode: str | None, setup: tuple[str, ...], prepare: tuple[str, ...], users_digest: str | None, home_dir: str,
    make_homes: bool,
) -> str:
    """users_digest: the users table's (users_digest); None: no users to add."""
    lines = ["set -eu", f"install -o slurm -g slurm -m 0600 {KEY_MOUNT}/{AUTH_KEY_FILE} {SLURM_ETC}/{AUTH_KEY_FILE}"]
    if config_mode is not None:
        # The glob skips the ConfigMap volume's dot-entries (..data); the files are symlinks, which install follows.
        lines.append(f'for file in {CONFIG_MOUNT}/*; do install -o slurm -g slurm -m {config_mode} "$file" {SLURM_ETC}/; done')
    # setup first: it readies a fresh shared home before homes are made on it.
    lines += setup
    if users_digest is not None:
        lines += _users_script(home_dir, make_homes, users_digest)
    lines += prepare
    return "\n".join(lines)
