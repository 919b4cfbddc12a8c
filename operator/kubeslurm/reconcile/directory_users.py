"""The CheckDirectoryUsers step: in ldap mode, is every user of spec.accounts known to the directory?

spec.accounts still maps users to Slurm accounts and shares (sacctmgr), but in ldap mode
the pods make no local users: a name the directory does not hold cannot log in, and
Slurm cannot map it to a uid. Such names are reported, never silently skipped: the
condition ACCOUNT_USERS_CONDITION (False, naming them and their accounts) and a Warning
Event. Their associations are still made in Slurm; slurmctld maps a uid to a user when it
loads the association and retries missing ones only hourly, so once a missing user appears
the operator runs `scontrol reconfigure` (slurmctld 24.11 restarts in place, running jobs
keep running), and the user can submit within a resync. (A user missing when the operator
itself restarted is not known to have been missing: Slurm's hourly retry covers that.)

The check asks the controller pod's name service (SSSD there, the same as on every node)
with one `getent passwd` for all users, through the operator's exec path into the
slurmctld container (slurm_control.SlurmControl.known_users). It runs when the users
changed, while some are missing (so that a user added to the directory clears the
condition within a resync plus SSSD's negative cache time) and otherwise every
RECHECK_SECONDS: a steady cluster does not look up thousands of users at every resync.
"""

import time
from dataclasses import dataclass, field

from ..api.conditions import now_rfc3339, set_condition
from .events import EventRecorder
from .run_state import Run

ACCOUNT_USERS_CONDITION = "AccountUsersInDirectory"
MISSING_REASON = "UsersNotInDirectory"
APPEARED_REASON = "UsersAppearedInDirectory"
RECHECK_SECONDS = 300


@dataclass
class DirectoryChecks:
    """What the last check of each cluster found: (users asked about, when, those missing). In memory:
    an operator that restarts checks again, which costs one getent."""

    last: dict[tuple[str, str], tuple[tuple[str, ...], float, tuple[str, ...]]] = field(default_factory=dict)
    clock: object = time.monotonic


def account_users(run: Run) -> dict[str, list[str]]:
    """user -> the accounts of spec.accounts that name it."""
    accounts: dict[str, list[str]] = {}
    for account in run.cluster.spec.accounts:
        for user in account.users:
            accounts.setdefault(user, []).append(account.name)
    return dict(sorted(accounts.items()))


def missing_message(missing: list[str], accounts: dict[str, list[str]]) -> str:
    named = ", ".join(f"{user} (account {', '.join(accounts[user])})" for user in missing)
    return (
        f"spec.accounts names users the directory does not know: {named}. They cannot log in and Slurm cannot "
        "map them to a uid: add them to the directory (they appear within spec.identity.ldap.negativeCacheTimeoutSeconds) "
        "or remove them from spec.accounts"
    )


def check_directory_users(events: EventRecorder, checks: DirectoryChecks, run: Run) -> None:
    """Sets run.users_missing_from_directory (a sorted list) when checked; leaves it None otherwise."""
    cluster = run.cluster
    if cluster.spec.identity.mode != "ldap" or run.slurm is None:
        return
    accounts = account_users(run)
    users = tuple(accounts)
    key = (cluster.metadata.namespace, cluster.metadata.name)
    previous = checks.last.get(key)
    now = checks.clock()
    if previous is not None:
        asked, when, missing = previous
        if asked == users and not missing and now - when < RECHECK_SECONDS:
            run.users_missing_from_directory = []
            return
    known = run.slurm.known_users(list(users))
    missing = tuple(user for user in users if user not in known)
    checks.last[key] = (users, now, missing)
    run.users_missing_from_directory = list(missing)
    if missing:
        events.warning(run.raw, MISSING_REASON, missing_message(list(missing), accounts))
    appeared = sorted(set(previous[2] if previous else ()) & known)
    if appeared:
        # slurmctld resolved these users' uids when it loaded their associations, found none,
        # and looks again only hourly: a reconfigure (slurmctld 24.11 restarts in place, jobs
        # keep running) loads them again, so they can submit now.
        run.slurm.reconfigure()
        events.normal(run.raw, APPEARED_REASON, f"now in the directory: {', '.join(appeared)}; scontrol reconfigure so "
                                                "slurmctld maps their uids to their accounts")


def with_directory_users_condition(conditions: list[dict], run: Run, generation: int | None) -> list[dict]:
    """`conditions` with ACCOUNT_USERS_CONDITION as this run found it: set when checked, kept when
    not checked this time, gone in local mode (where the pods make the users themselves)."""
    if run.cluster is None:
        return conditions
    if run.cluster.spec.identity.mode != "ldap":
        return [c for c in conditions if c.get("type") != ACCOUNT_USERS_CONDITION]
    missing = run.users_missing_from_directory
    if missing is None:
        return conditions
    found = not missing
    return set_condition(conditions, {
        "type": ACCOUNT_USERS_CONDITION,
        "status": "True" if found else "False",
        "reason": "AllUsersFound" if found else MISSING_REASON,
        "message": "" if found else missing_message(missing, account_users(run)),
        "lastTransitionTime": now_rfc3339(),
        "observedGeneration": generation,
    })
