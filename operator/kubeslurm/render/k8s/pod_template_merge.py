"""Merge a NodeSet's spec.podTemplate (a partial pod template) over the operator's.

The rules are kubectl's strategic merge, which users already know: maps merge key
by key, lists of containers, volumes, env vars, mounts and ports merge item by item
on their key (an item with a new key is appended), every other list is replaced, and
a null removes the field. So `containers: [{name: slurmd, image: my/slurm}]` swaps
only the image, and a container with another name is added as a sidecar.
"""

from copy import deepcopy

LIST_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def merge_pod_template(base: dict, overlay: dict | None) -> dict:
    """A new template: `overlay` merged over `base`; neither is changed."""
    return _merge(base, overlay or {})


def _merge(base: dict, overlay: dict) -> dict:
    result = deepcopy(base)
    for key, value in overlay.items():
        current = result.get(key)
        if value is None:
            result.pop(key, None)
        elif isinstance(current, dict) and isinstance(value, dict):
            result[key] = _merge(current, value)
        elif isinstance(current, list) and isinstance(value, list) and key in LIST_MERGE_KEYS:
            result[key] = _merge_list(current, value, LIST_MERGE_KEYS[key])
        else:
            result[key] = deepcopy(value)
    return result


def _merge_list(base: list, overlay: list, merge_key: str) -> list:
    result = deepcopy(base)
    position = {item.get(merge_key): index for index, item in enumerate(result) if isinstance(item, dict)}
    for item in overlay:
        index = position.get(item.get(merge_key)) if isinstance(item, dict) else None
        if index is None:
            result.append(deepcopy(item))
        else:
            result[index] = _merge(result[index], item)
    return result
