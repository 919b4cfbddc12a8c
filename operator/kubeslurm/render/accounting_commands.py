"""The sacctmgr commands that make Slurm's accounts match spec.accounts.

Accounts live in slurmdbd, not in a file, so they are applied as commands. Each
command is idempotent in effect: `add` of an existing entity fails harmlessly and
`modify` sets absolute values, so running the list again changes nothing.
"""

from ..api import SlurmCluster

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
    return [f"GrpTRES={','.join(tres)}", f"GrpJobs={jobs}", f"GrpSubmitJobs={submit}"]


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
