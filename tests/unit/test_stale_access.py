"""Associations the spec dropped leave Slurm; only those kubeslurm made, and never while jobs hold them.

Table tests of the pure planning (render/config/accounting_commands.py), the parsing of sacctmgr's
output (reconcile/slurm_control.py), and the reconcile step (_apply_accounts) against a
recording stand-in for sacctmgr that answers as Slurm 24.11 does (seen in the real-Slurm tier).
"""

import subprocess

import pytest

from kubeslurm.reconcile.run_state import Run
from kubeslurm.reconcile.slurm_control import SlurmCommandError, SlurmControl, parse_associations
from kubeslurm.reconcile.slurm_sync import _apply_accounts, accounts_hash
from kubeslurm.reconcile.status import cluster_status
from kubeslurm.render.config.accounting_commands import (
    AssociationRemoval,
    SlurmAssociations,
    removal_plan,
    stale_associations,
    still_applied,
)

from .manifests import contract_documents, load_with_uids, set_path

C = "research"


def slurm(users: dict[str, set[str]], defaults: dict[str, str] | None = None, sub: dict[str, set[str]] | None = None):
    return SlurmAssociations(
        users={a: frozenset(u) for a, u in users.items()},
        sub_accounts={p: frozenset(c) for p, c in (sub or {}).items()},
        default_accounts=defaults or {},
    )


def delete_user(user, account):
    return ("delete", "user", "where", f"name={user}", f"account={account}", f"cluster={C}")


def delete_account(account):
    return ("delete", "account", "where", f"name={account}", f"cluster={C}")


def set_default(user, account):
    return ("modify", "user", "where", f"name={user}", f"cluster={C}", "set", f"DefaultAccount={account}")


@pytest.mark.parametrize("applied, desired, stale", [
    ({}, {"vision": ["alice"]}, {}),
    ({"vision": ["alice"]}, {"vision": ["alice"]}, {}),
    ({"vision": ["alice", "bob"]}, {"vision": ["alice"]}, {"vision": ["bob"]}),
    ({"vision": ["alice"], "nlp": ["bob"]}, {"vision": ["alice"]}, {"nlp": ["bob"]}),
    ({"empty": []}, {}, {"empty": []}),
    # users added by the spec are never stale; a human's are never in `applied`
    ({"vision": ["alice"]}, {"vision": ["alice", "carol"]}, {}),
])
def test_stale_associations(applied, desired, stale):
    assert stale_associations(applied, desired) == stale


@pytest.mark.parametrize("why, stale, desired, held, removals, left", [
    ("a user removed from an account it is not the default of",
     {"vision": ["bob"]}, {"vision": ["alice"], "nlp": ["bob"]},
     slurm({"vision": {"alice", "bob"}, "nlp": {"bob"}}, {"bob": "nlp"}),
     [AssociationRemoval("vision", "bob", (delete_user("bob", "vision"),))], {}),
    ("the default account moves to the first account of the spec the user keeps",
     {"vision": ["dave"]}, {"vision": ["alice"], "nlp": ["dave"], "ml": ["dave"]},
     slurm({"vision": {"alice", "dave"}, "nlp": {"dave"}, "ml": {"dave"}}, {"dave": "vision"}),
     [AssociationRemoval("vision", "dave", (set_default("dave", "nlp"), delete_user("dave", "vision")))], {}),
    ("or to an account a human gave the user",
     {"vision": ["dave"]}, {"vision": ["alice"]},
     slurm({"vision": {"alice", "dave"}, "theirs": {"dave"}}, {"dave": "vision"}),
     [AssociationRemoval("vision", "dave", (set_default("dave", "theirs"), delete_user("dave", "vision")))], {}),
    ("a user leaving every account: the default association goes last",
     {"nlp": ["dave"], "vision": ["dave"]}, {},
     slurm({"vision": {"dave"}, "nlp": {"dave"}}, {"dave": "nlp"}),
     [AssociationRemoval("vision", "dave", (delete_user("dave", "vision"),)),
      AssociationRemoval("nlp", "dave", (delete_user("dave", "nlp"),), after=(("vision", "dave"),)),
      AssociationRemoval("nlp", None, (delete_account("nlp"),), after=(("nlp", "dave"),)),
      AssociationRemoval("vision", None, (delete_account("vision"),), after=(("vision", "dave"),))], {}),
    ("an account the spec dropped goes after its users",
     {"old": ["erin"]}, {"vision": ["alice"]},
     slurm({"old": {"erin"}, "vision": {"alice"}}, {"erin": "old"}),
     [AssociationRemoval("old", "erin", (delete_user("erin", "old"),)),
      AssociationRemoval("old", None, (delete_account("old"),), after=(("old", "erin"),))], {}),
    ("an account holding a user a human added stays (delete account would take the user too)",
     {"old": ["erin"]}, {},
     slurm({"old": {"erin", "hank"}}, {"erin": "old", "hank": "old"}),
     [AssociationRemoval("old", "erin", (delete_user("erin", "old"),))], {"old": ["hank"]}),
    ("an account holding a human's sub-account stays",
     {"old": []}, {},
     slurm({"old": set(), "child": set()}, sub={"old": {"child"}}),
     [], {"old": ["account child"]}),
    ("what Slurm no longer holds needs nothing",
     {"old": ["erin"], "vision": ["bob"]}, {"vision": ["alice"]},
     slurm({"vision": {"alice"}}, {}),
     [], {}),
])
def test_removal_plan(why, stale, desired, held, removals, left):
    plan = removal_plan(C, stale, desired, held)
    assert plan.removals == removals, why
    assert plan.left_to_humans == left, why


def test_what_waits_for_jobs_stays_applied_to_be_tried_again():
    waiting = [AssociationRemoval("old", "erin", ()), AssociationRemoval("old", None, ()), AssociationRemoval("vision", "bob", ())]
    assert still_applied({"vision": ["alice"]}, waiting) == {"vision": ["alice", "bob"], "old": ["erin"]}
    assert still_applied({"vision": ["alice"]}, []) == {"vision": ["alice"]}


def test_parse_associations_of_sacctmgr_24_11():
    assoc = "root||\nroot||root\nnlp|root|\nnlp||bob\nold|root|\nold||erin\nchild|old|\nvision|root|\nvision||alice\n"
    users = "alice|vision\nbob|nlp\nerin|old\nhank|\nroot|root\n"
    parsed = parse_associations(assoc, users)
    assert parsed.users == {"root": {"root"}, "nlp": {"bob"}, "old": {"erin"}, "child": set(), "vision": {"alice"}}
    assert parsed.sub_accounts == {"root": {"nlp", "old", "vision"}, "old": {"child"}}
    assert parsed.default_accounts == {"alice": "vision", "bob": "nlp", "erin": "old", "root": "root"}


# ---- the reconcile step, against sacctmgr's answers -------------------------------------

ASSOC_LISTING = ("sacctmgr", "--noheader", "--parsable2", "show", "assoc")
USER_LISTING = ("sacctmgr", "--noheader", "--parsable2", "show", "user")


class Sacctmgr:
    """Records every command; answers listings from `held`, deletions as Slurm would."""

    def __init__(self, held: dict[str, set[str]], defaults: dict[str, str], busy: set[tuple[str, str]] = frozenset()):
        self.held, self.defaults, self.busy = held, defaults, busy
        self.calls: list[list[str]] = []

    def __call__(self, argv, timeout=60):
        self.calls.append(list(argv))
        if tuple(argv[:5]) == ASSOC_LISTING:
            lines = [f"{a}|root|" for a in self.held] + [f"{a}||{u}" for a, users in self.held.items() for u in users]
            return subprocess.CompletedProcess(argv, 0, "\n".join(lines) + "\n", "")
        if tuple(argv[:5]) == USER_LISTING:
            return subprocess.CompletedProcess(argv, 0, "".join(f"{u}|{a}\n" for u, a in self.defaults.items()), "")
        if argv[2:4] == ["delete", "user"]:
            user, account = argv[5].split("=")[1], argv[6].split("=")[1]
            if (account, user) in self.busy:
                return subprocess.CompletedProcess(argv, 1, "", " Error with request: Job(s) active, cancel job(s) before remove\n")
            if user not in self.held.get(account, ()):
                return subprocess.CompletedProcess(argv, 1, " Nothing deleted\n", "")
            self.held[account].discard(user)
        if argv[2:4] == ["delete", "account"]:
            account = argv[5].split("=")[1]
            if any(a == account for a, _ in self.busy):
                return subprocess.CompletedProcess(argv, 1, "", " Error with request: Job(s) active, cancel job(s) before remove\n")
            self.held.pop(account, None)
        return subprocess.CompletedProcess(argv, 0, "", "")

    def sacctmgr_calls(self):
        return [call[1:] if call[1] != "--immediate" else call[2:] for call in self.calls]


class Events:
    def __init__(self):
        self.seen = []

    def normal(self, obj, reason, message):
        self.seen.append(("Normal", reason, message))

    def warning(self, obj, reason, message):
        self.seen.append(("Warning", reason, message))


CLUSTER, *_ = contract_documents()  # vision: alice, nlp: bob


def run_with(cluster_doc, status, sacctmgr):
    cluster, *_ = load_with_uids(cluster_doc)
    raw = {**cluster_doc, "status": status}
    run = Run(raw=raw, cluster=cluster, slurm=SlurmControl(sacctmgr))
    return run


def steady_status(cluster_doc, applied):
    cluster, *_ = load_with_uids(cluster_doc)
    return {"appliedAccountsHash": accounts_hash(cluster), "appliedAccounts": [{"name": a, "users": u} for a, u in applied.items()]}


def test_nothing_changed_runs_no_sacctmgr_and_changes_no_status():
    sacctmgr = Sacctmgr({"vision": {"alice"}, "nlp": {"bob"}}, {"alice": "vision", "bob": "nlp"})
    status = steady_status(CLUSTER, {"vision": ["alice"], "nlp": ["bob"]})
    run = run_with(CLUSTER, status, sacctmgr)
    _apply_accounts(Events(), run, status)
    assert sacctmgr.calls == []
    assert run.applied_accounts == {"vision": ["alice"], "nlp": ["bob"]}


def test_a_cluster_from_before_applied_accounts_records_the_spec_and_runs_nothing():
    sacctmgr = Sacctmgr({"vision": {"alice"}, "nlp": {"bob"}, "human": {"hank"}}, {})
    cluster, *_ = load_with_uids(CLUSTER)
    status = {"appliedAccountsHash": accounts_hash(cluster)}
    run = run_with(CLUSTER, status, sacctmgr)
    _apply_accounts(Events(), run, status)
    assert sacctmgr.calls == []
    assert run.applied_accounts == {"vision": ["alice"], "nlp": ["bob"]}


def test_removing_a_user_and_an_account_deletes_their_associations_once():
    sacctmgr = Sacctmgr({"vision": {"alice", "carol"}, "nlp": {"bob"}}, {"alice": "vision", "bob": "nlp", "carol": "vision"})
    applied = {"vision": ["alice", "carol"], "nlp": ["bob"]}
    old = set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice", "carol"]}, {"name": "nlp", "users": ["bob"]}])
    status = steady_status(old, applied)
    events = Events()
    run = run_with(set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}]), status, sacctmgr)
    _apply_accounts(events, run, status)
    calls = sacctmgr.sacctmgr_calls()
    assert calls[0][:2] == ["add", "cluster"]  # the spec changed: its commands run first
    assert ["delete", "user", "where", "name=bob", "account=nlp", f"cluster={C}"] in calls
    assert ["delete", "user", "where", "name=carol", "account=vision", f"cluster={C}"] in calls
    assert calls[-1] == ["delete", "account", "where", "name=nlp", f"cluster={C}"]
    assert run.applied_accounts == {"vision": ["alice"]}
    assert ("Normal", "AssociationsRemoved",
            "removed from Slurm (job records kept): user bob in account nlp, user carol in account vision, account nlp") in events.seen
    assert run.progressing == []
    # the next reconcile: nothing left to do, nothing run
    sacctmgr.calls.clear()
    status = steady_status(set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}]), run.applied_accounts)
    run = run_with(set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}]), status, sacctmgr)
    _apply_accounts(Events(), run, status)
    assert sacctmgr.calls == []


def test_an_association_with_jobs_is_removed_later_and_the_reconcile_goes_on():
    sacctmgr = Sacctmgr({"vision": {"alice", "carol"}, "nlp": {"bob"}}, {"alice": "vision", "bob": "nlp", "carol": "vision"},
                        busy={("vision", "carol")})
    spec = set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}, {"name": "nlp", "users": ["bob"]}])
    status = steady_status(spec, {"vision": ["alice", "carol"], "nlp": ["bob"]})
    status["appliedAccountsHash"] = "spec-before"
    run = run_with(spec, status, sacctmgr)
    _apply_accounts(Events(), run, status)
    assert run.applied_accounts == {"vision": ["alice", "carol"], "nlp": ["bob"]}
    assert run.progressing == ["waiting for the jobs of user carol in account vision to end before removing them from Slurm"]
    # carol's job ended: the next reconcile removes her
    sacctmgr.busy = set()
    status = steady_status(spec, run.applied_accounts)
    run = run_with(spec, status, sacctmgr)
    _apply_accounts(Events(), run, status)
    assert run.applied_accounts == {"vision": ["alice"], "nlp": ["bob"]}
    assert "carol" not in sacctmgr.held["vision"]


def test_while_a_user_s_other_association_has_jobs_its_default_one_and_the_account_wait_untried():
    """Slurm refuses to delete a default association while the user has another: not even tried."""
    sacctmgr = Sacctmgr({"vision": {"alice", "carol"}, "interns": {"carol"}}, {"alice": "vision", "carol": "vision"},
                        busy={("interns", "carol")})
    spec = set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}])
    status = steady_status(spec, {"vision": ["alice", "carol"], "interns": ["carol"]})
    run = run_with(spec, status, sacctmgr)
    _apply_accounts(Events(), run, status)
    deletions = [call for call in sacctmgr.sacctmgr_calls() if call[0] == "delete"]
    assert deletions == [["delete", "user", "where", "name=carol", "account=interns", f"cluster={C}"]]
    assert run.applied_accounts == {"vision": ["alice", "carol"], "interns": ["carol"]}
    assert run.progressing == ["waiting for the jobs of user carol in account interns, user carol in account vision, "
                               "account interns to end before removing them from Slurm"]


def test_an_account_holding_a_human_s_user_is_left_with_a_warning():
    sacctmgr = Sacctmgr({"vision": {"alice"}, "nlp": {"bob", "hank"}}, {"alice": "vision", "bob": "nlp", "hank": "nlp"})
    spec = set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}])
    status = steady_status(CLUSTER, {"vision": ["alice"], "nlp": ["bob"]})
    events = Events()
    run = run_with(spec, status, sacctmgr)
    _apply_accounts(events, run, status)
    assert sacctmgr.held == {"vision": {"alice"}, "nlp": {"hank"}}
    assert run.applied_accounts == {"vision": ["alice"]}  # nlp is the humans' now: never touched again
    assert any(kind == "Warning" and reason == "AccountLeftInSlurm" and "hank" in message for kind, reason, message in events.seen)


def test_any_other_sacctmgr_refusal_fails_the_step_naming_the_command():
    class Refusing(Sacctmgr):
        def __call__(self, argv, timeout=60):
            if argv[2:4] == ["delete", "user"]:
                self.calls.append(list(argv))
                return subprocess.CompletedProcess(argv, 1, "", " Error with request: something new\n")
            return super().__call__(argv, timeout)

    sacctmgr = Refusing({"vision": {"alice", "carol"}}, {"carol": "vision"})
    spec = set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}])
    status = steady_status(spec, {"vision": ["alice", "carol"]})
    with pytest.raises(SlurmCommandError, match="sacctmgr delete user where name=carol account=vision cluster=research failed"):
        _apply_accounts(Events(), run_with(spec, status, sacctmgr), status)


def test_status_records_applied_accounts_and_keeps_unix_ids_through_a_failure():
    spec = set_path(CLUSTER, "spec.accounts", [{"name": "vision", "users": ["alice"]}])
    cluster, *_ = load_with_uids(spec)
    raw = {**spec, "metadata": {**spec["metadata"], "generation": 2}}
    run = Run(raw=raw, cluster=cluster, slurm=SlurmControl(Sacctmgr({}, {})))
    run.applied_accounts = {"vision": ["alice", "carol"]}
    run.unix_ids = {"alice": 100_001, "carol": 100_002}
    status = cluster_status(run, None, {}).to_wire()
    assert status["appliedAccounts"] == [{"name": "vision", "users": ["alice", "carol"]}]
    assert status["unixIds"] == {"alice": 100_001, "carol": 100_002}

    from kubeslurm.reconcile.run_state import StepFailed
    failed = Run(raw=raw)  # failed before the spec was even loaded
    old = {"unixIds": {"alice": 100_001}, "appliedAccounts": [{"name": "vision", "users": ["alice"]}]}
    kept = cluster_status(failed, StepFailed("LoadSpec", "InvalidSpec", "bad"), old).to_wire()
    assert kept["unixIds"] == {"alice": 100_001}
    assert kept["appliedAccounts"] == [{"name": "vision", "users": ["alice"]}]
