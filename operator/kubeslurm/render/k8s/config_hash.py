"""The pod annotation that rolls a pod when a file it copied at start changes.

Pods copy their config files once (an init container), so a changed ConfigMap or
Secret reaches them only through a new pod; a changed hash in the pod template is
what makes the StatefulSet replace them. The hash covers only what that pod reads.

Pod templates are readable by anyone who may read StatefulSets or pods, so a file
that holds a secret (slurmdbd.conf holds the database password) is hashed with a key:
a plain hash would let a reader test password guesses offline against it (a weak
external password was recovered from one with a word list). The key is derived from
the cluster's auth key, which only the operator and the Slurm daemons read.
"""

import hashlib
import hmac
import json

CONFIG_HASH_ANNOTATION = "kubeslurm.io/config-hash"
# What the auth key is stretched into for this one use: the auth key itself signs
# Slurm's credentials (HS256), and a key should serve one purpose only.
CONFIG_HASH_KEY_CONTEXT = b"kubeslurm.io/config-hash-key/v1"
MIN_CONFIG_HASH_KEY_BYTES = 32


def _canonical(files: dict[str, str]) -> bytes:
    return json.dumps(files, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def config_hash(files: dict[str, str]) -> str:
    """sha256 of files that hold no secret (slurm.conf, gres.conf, ...)."""
    return hashlib.sha256(_canonical(files)).hexdigest()


def config_hash_key(auth_key: bytes) -> bytes:
    """The key of keyed_config_hash for a cluster, from the bytes of its auth key Secret."""
    if not auth_key:
        raise ValueError("the Slurm auth key is empty: the config hash key is derived from it")
    return hmac.new(auth_key, CONFIG_HASH_KEY_CONTEXT, hashlib.sha256).digest()


def keyed_config_hash(files: dict[str, str], key: bytes) -> str:
    """HMAC-SHA256 of files that hold a secret; only who holds `key` can compute or test it."""
    if len(key) < MIN_CONFIG_HASH_KEY_BYTES:
        raise ValueError(
            f"the config hash key has {len(key)} bytes, at least {MIN_CONFIG_HASH_KEY_BYTES} are needed: "
            "derive it from the cluster's auth key with config_hash_key"
        )
    return hmac.new(key, _canonical(files), hashlib.sha256).hexdigest()
