"""The Kubernetes side of placing a Slurm-scheduled pod: its Binding, and why it still waits.

A Binding is what kube-scheduler posts to place a pod; kubeslurm posts it for the pods whose
schedulerName is its own, naming the pod's UID so that a pod deleted and re-created under the
same name is never bound by a decision made for the old one. While the pod waits, its
PodScheduled condition carries Slurm's pending reason, which `kubectl describe pod` shows.
"""

PENDING_REASON = "SlurmPending"


def binding(pod_name: str, pod_uid: str, node_name: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod_name, "uid": pod_uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


def pending_condition_patch(message: str, now: str) -> dict:
    """A strategic-merge patch of the pod's status: conditions merge by type, so only
    PodScheduled changes."""
    return {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": PENDING_REASON,
        "message": message, "lastTransitionTime": now,
    }]}}
