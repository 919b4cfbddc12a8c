"""The SyncBridge step of a cluster's reconcile: Slurm-scheduled pods, when spec.bridge is on.

It checks once per Slurm image that the image carries the bridge's Epilog (without it slurmd
drains every node at the first job end, and nothing would hold a pod's resources while the pod
still runs), then runs one level-based pass of bridge_sync over the bridged namespaces. The
pass reads (one pod listing per bridged namespace and per other namespace where pods asked
for this cluster's scheduler, one squeue) and writes only what its plan
says, so a reconcile with nothing new writes nothing. Slurm's commands go through the
controller pod (run.slurm), the hold files through exec into the slurmd pods.
"""

from __future__ import annotations

import logging
from typing import Callable, Collection

from ..api.bridge import BRIDGE_EPILOG
from ..render.bridge.bridged_nodes import bridged_nodes_only
from .bridge_sync import BridgeAccess, BridgeSyncFailed, SlurmdRunner, sync_bridge
from .events import EventRecorder
from .kube_api import KubeApi
from .run_state import Run, StepFailed
from .slurm_access import SLURMD_CONTAINER

log = logging.getLogger(__name__)

STEP = "SyncBridge"
# How soon a preempted placeholder's pod is deleted at worst (the resync period otherwise: 30 s).
HELD_PLACEHOLDERS_RESYNC_SECONDS = 5.0
# Slurm node name -> runner, for the slurmd pods of one namespace
SlurmdAccess = Callable[[str], SlurmdRunner]
# cluster name -> the namespaces where pods asking for its scheduler were seen (handlers.Runtime)
BridgePodNamespaces = Callable[[str], Collection[str]]


def epilog_missing_message(image: str) -> str:
    return (f"spec.bridge is enabled but the Slurm image {image} has no executable {BRIDGE_EPILOG}: "
            f"slurmd would drain its nodes and nothing would hold a pod's resources while it runs. "
            f"Install images/slurm/bridge-epilog.sh there (as kubeslurm's Slurm image does), or disable spec.bridge")


def _slurmd_image(pod: dict) -> str | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == SLURMD_CONTAINER:
            return container.get("image")
    return None


def _running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and bool((pod.get("spec") or {}).get("nodeName"))


class BridgeStep:
    """Kept by the reconciler: which images were seen to carry the Epilog (checked once each)."""

    def __init__(self, api: KubeApi, events: EventRecorder | None, slurmd_access: SlurmdAccess | None,
                 pod_namespaces: BridgePodNamespaces | None = None):
        self.api = api
        self.events = events
        self.slurmd_access = slurmd_access
        self.pod_namespaces = pod_namespaces
        self.images_with_epilog: set[str] = set()

    def __call__(self, run: Run) -> None:
        cluster = run.cluster
        if not cluster.spec.bridge.enabled or run.slurm is None or self.slurmd_access is None:
            return  # off; or slurmctld not answering: nothing can be submitted or read, the next run tries
        on_slurmd = self.slurmd_access(cluster.metadata.namespace)
        self.check_epilog(run, on_slurmd)
        access = BridgeAccess(self.api, run.slurm, on_slurmd, self.events)
        try:
            asking = self.pod_namespaces(cluster.metadata.name) if self.pod_namespaces else ()
            plan = sync_bridge(cluster, run.slurmd_pods, access, asking, bridged_nodes_only(run.models))
        except BridgeSyncFailed as error:
            raise StepFailed(STEP, "BridgeSyncFailed", str(error)) from None
        if plan.submitted or plan.bind or plan.cancel or plan.release:
            # Slurm answers these within seconds (a job starts, completes) and no watch event says so.
            run.again_soon = True
        elif plan.placeholders_held:
            # A running placeholder may be preempted at any moment, and nothing announces it: its
            # preemptor (and the whole node, COMPLETING) waits until a run deletes the pod.
            run.look_again_within = HELD_PLACEHOLDERS_RESYNC_SECONDS

    def check_epilog(self, run: Run, on_slurmd: SlurmdRunner) -> None:
        for pod in run.slurmd_pods:
            image = _slurmd_image(pod)
            if image is None or image in self.images_with_epilog or not _running(pod):
                continue
            result = on_slurmd(pod["metadata"]["name"], ["test", "-x", BRIDGE_EPILOG])
            if result.returncode == 0:
                self.images_with_epilog.add(image)
            elif result.returncode == 1:  # test's "no"; anything else (exec failed) is asked again next run
                raise StepFailed(STEP, "BridgeEpilogMissing", epilog_missing_message(image))
            else:
                log.info("could not check %s in %s: %s", BRIDGE_EPILOG, pod["metadata"]["name"], result.stderr)
