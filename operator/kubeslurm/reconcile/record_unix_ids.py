"""Record the uid of every account user in status.unixIds before anything is rendered with it.

Pods, and the files users write from them, carry these uids, so the assignment must outlive
any one reconcile: it is written to the status first (only when a user is new), and the
render that follows reads it from the run. A reconcile that fails after this step has still
recorded what it may have applied; one that fails before has rendered nothing.
"""

from ..api import SlurmClusterStatus
from ..ownership import SLURM_CLUSTER
from kubeslurm.render.unix_ids import assign_unix_ids
from .kube_api import KubeApi
from .run_state import Run


def record_unix_ids(api: KubeApi, run: Run) -> None:
    status = run.raw.get("status") or {}
    recorded = status.get("unixIds") or {}
    users = (user for account in run.cluster.spec.accounts for user in account.users)
    assignment = assign_unix_ids(users, recorded)  # refuses a hand-edited table that shares or leaves the range
    if assignment != recorded:
        meta = run.raw["metadata"]
        # A merge patch only adds keys here: a uid, once recorded, is never taken back.
        patch = SlurmClusterStatus.model_validate({"unixIds": assignment}).to_wire()
        api.patch_status(SLURM_CLUSTER, meta["namespace"], meta["name"], {"unixIds": patch["unixIds"]})
        run.raw["status"] = {**status, "unixIds": assignment}
    run.unix_ids = assignment
