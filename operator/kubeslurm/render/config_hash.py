"""The pod annotation that rolls a pod when a file it copied at start changes.

Pods copy their config files once (an init container), so a changed ConfigMap or
Secret reaches them only through a new pod; a changed hash in the pod template is
what makes the StatefulSet replace them. The hash covers only what that pod reads.
"""

import hashlib
import json

CONFIG_HASH_ANNOTATION = "kubeslurm.io/config-hash"


def config_hash(files: dict[str, str]) -> str:
    canonical = json.dumps(files, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
