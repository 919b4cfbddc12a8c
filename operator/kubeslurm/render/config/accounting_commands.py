"""The sacctmgr commands that make Slurm's accounts match spec.accounts.

Accounts live in slurmdbd, not in a file, so they are applied as commands. Each
command is idempotent in effect: `add` of an existing entity fails harmlessly and
`modify` sets absolute values, so running the list again changes nothing.
"""

from dataclasses import dataclass, field

from kubeslurm.api import SlurmCluster

_LIMIT_TRES = (("max_gpus", "gres/gpu"), ("max_cpus", "cpu"), ("max_nodes", "node"))


def account_limits(account) -> list[str]:
    """sacctmgr `set` arguments; -1 clears a limit that the spec no longer sets."""
    limits = account.limits
    tres = []
    for field, name in _LIMIT_TRES:
        value = getattr(limits, field) if limits else None
        tres.append(f"{name}={value if value is not None else -1}")
    jobs = limits.max_running_jobs if limits and limits.max_running_jobs is not None else -1
    submit = limits.max_submit_jobs if limits and limits.max_submit_jobs is not None else -1
    wall = limits.max_job_time if limits and limits.max_job_time is not None else -1
    return [f"GrpTRES={','.join(tres)}", f"GrpJobs={jobs}", f"GrpSubmitJobs={submit}", f"MaxWall={wall}"]


def accounting_commands(cluster: SlurmCluster) -> list[list[str]]:
    """Argument lists for `sacctmgr --immediate`, in order: cluster, accounts, users."""
    name = cluster.metadata.name
    commands = [["add", "cluster", name]]
    for account in cluster.spec.accounts:
        commands.append(["add", "account", account.name, f"Cluster={name}", f"Fairshare={account.shares}"])
        commands.append(
            ["modify", "account", "where", f"name={account.name}", f"cluster={name}", "set",
             f"Fairshare={account.shares}", *account_limits(account)]
        )
        for user in account.users:
            commands.append(["add", "user", user, f"Account={account.name}", f"Cluster={name}"])
    return commands


# ---- removing what the spec no longer names ---------------------------------------------
#
# Only associations kubeslurm made are removed: status.appliedAccounts records them
# (account -> users), and what a human added with sacctmgr is never in it. Removing an
# association never touches job records (sacct keeps them). Slurm 24.11 refuses, and
# these commands work around or wait for:
# - deleting a user's default-account association while it has others ("You can not
#   remove the default account of a user"): the default moves to an account it keeps first;
# - deleting an association with running or pending jobs ("Job(s) active, cancel job(s)
#   before remove"): the removal waits, and the next reconcile tries again;
# - `delete account` also deletes every user association under it, a human's too: an
#   account holding users or sub-accounts kubeslurm did not add is left in place.

AppliedAccounts = dict[str, list[str]]  # account -> users, as in status.appliedAccounts


def desired_associations(cluster: SlurmCluster) -> AppliedAccounts:
    """What spec.accounts asks Slurm to hold, in the shape of status.appliedAccounts."""
    return {account.name: list(account.users) for account in cluster.spec.accounts}


def stale_associations(applied: AppliedAccounts, desired: AppliedAccounts) -> AppliedAccounts:
    """The part of `applied` the spec no longer names: account -> users to remove; an account
    absent from `desired` is there with all its applied users (the account goes too)."""
    stale: AppliedAccounts = {}
    for account, users in sorted(applied.items()):
        gone = [user for user in users if user not in desired.get(account, ())]
        if gone or account not in desired:
            stale[account] = sorted(gone)
    return stale


@dataclass(frozen=True)
class SlurmAssociations:
    """The associations Slurm holds for one cluster (sacctmgr show assoc / show user)."""

    users: dict[str, frozenset[str]] = field(default_factory=dict)  # account -> users associated with it
    sub_accounts: dict[str, frozenset[str]] = field(default_factory=dict)  # parent account -> child accounts
    default_accounts: dict[str, str] = field(default_factory=dict)  # user -> its default account

    @property
    def accounts(self) -> set[str]:
        return set(self.users) | {child for children in self.sub_accounts.values() for child in children}


@dataclass(frozen=True)
class AssociationRemoval:
    """One association to delete (user None: the account itself) and the commands that do it.

    after: (account, user) of removals that must be done first; while one of them waits for
    jobs this one waits too (Slurm would refuse it: the default account, or an account with users).
    """

    account: str
    user: str | None
    commands: tuple[tuple[str, ...], ...]
    after: tuple[tuple[str, str | None], ...] = ()

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.account, self.user)


@dataclass(frozen=True)
class RemovalPlan:
    removals: list[AssociationRemoval]
    # accounts the spec dropped that stay in Slurm: account -> what a human added under it
    left_to_humans: dict[str, list[str]]


def removal_plan(cluster_name: str, stale: AppliedAccounts, desired: AppliedAccounts, slurm: SlurmAssociations) -> RemovalPlan:
    """The sacctmgr commands that remove `stale` (see stale_associations) from what Slurm holds.

    Associations Slurm no longer holds need nothing. Of a user's associations, the default
    one goes last; when the user keeps an account, that becomes its default first (the
    spec's first account of the user, else one it holds outside the spec).
    """
    removing = {(account, user) for account, users in stale.items() for user in users}
    removals: list[AssociationRemoval] = []
    by_user: dict[str, list[str]] = {}
    for account, user in removing:
        if user in slurm.users.get(account, ()):
            by_user.setdefault(user, []).append(account)
    for user in sorted(by_user):
        default = slurm.default_accounts.get(user)
        # non-default associations first: Slurm refuses to delete the default while others exist
        for account in sorted(by_user[user], key=lambda a: (a == default, a)):
            commands: list[tuple[str, ...]] = []
            after: tuple[tuple[str, str | None], ...] = ()
            if account == default:
                kept = [a for a, users in desired.items() if user in users]
                kept += sorted(a for a, users in slurm.users.items() if user in users and a not in desired and (a, user) not in removing)
                if kept:
                    commands.append(("modify", "user", "where", f"name={user}", f"cluster={cluster_name}", "set", f"DefaultAccount={kept[0]}"))
                else:
                    after = tuple((other, user) for other in sorted(by_user[user]) if other != account)
            commands.append(("delete", "user", "where", f"name={user}", f"account={account}", f"cluster={cluster_name}"))
            removals.append(AssociationRemoval(account, user, tuple(commands), after))
    left_to_humans: dict[str, list[str]] = {}
    for account in sorted(a for a in stale if a not in desired):
        if account not in slurm.accounts:
            continue
        theirs = sorted(slurm.users.get(account, frozenset()) - {u for a, u in removing if a == account})
        theirs += sorted(f"account {child}" for child in slurm.sub_accounts.get(account, ()))
        if theirs:
            left_to_humans[account] = theirs
            continue
        users_first = tuple(r.key for r in removals if r.account == account)
        delete = ("delete", "account", "where", f"name={account}", f"cluster={cluster_name}")
        removals.append(AssociationRemoval(account, None, (delete,), users_first))
    return RemovalPlan(removals, left_to_humans)


def still_applied(desired: AppliedAccounts, waiting: list[AssociationRemoval]) -> AppliedAccounts:
    """status.appliedAccounts after a removal round: the spec's, plus what Slurm refused to remove yet."""
    applied = {account: list(users) for account, users in desired.items()}
    for removal in waiting:
        users = applied.setdefault(removal.account, [])
        if removal.user is not None and removal.user not in users:
            users.append(removal.user)
    return applied
