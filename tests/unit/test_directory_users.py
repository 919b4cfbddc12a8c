"""CheckDirectoryUsers: account users the name service lacks are named in a condition and an Event.

The name service here is this machine's, through the real `getent` (one call for all users),
run by the same SlurmControl.known_users the operator runs in the slurmctld container."""

import subprocess

from kubeslurm.reconcile.directory_users import (
    ACCOUNT_USERS_CONDITION,
    RECHECK_SECONDS,
    DirectoryChecks,
    check_directory_users,
    with_directory_users_condition,
)
from kubeslurm.reconcile.events import EventRecorder
from kubeslurm.reconcile.run_state import Run
from kubeslurm.reconcile.slurm_control import SlurmControl, parse_passwd_names

from .manifests import contract_documents, load_with_uids, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
LDAP = set_path(CLUSTER, "spec.identity", {"mode": "ldap", "ldap": {
    "uris": ["ldap://ldap.example.org"], "searchBase": "dc=example,dc=org", "caCertificate": {"configMap": {"name": "ca"}}}})
# root and daemon exist on every Debian machine; the other two nowhere.
ACCOUNTS = [{"name": "vision", "users": ["root", "nosuch-alice"]}, {"name": "nlp", "users": ["daemon", "nosuch-alice", "nosuch-bob"]}]


class Commands:
    """Records every command; runs `getent` on this machine (the real lookup), and only records the
    Slurm commands (no slurmctld here: `scontrol reconfigure` is answered as done)."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, argv, timeout=60):
        self.calls.append(argv)
        if argv[0] != "getent":
            return subprocess.CompletedProcess(argv, 0, "", "")
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


class PostedEvents(EventRecorder):
    def __init__(self):
        super().__init__(api=None)
        self.posted: list[tuple[str, str, str]] = []

    def _post(self, obj, event_type, reason, message):
        self.posted.append((event_type, reason, message))


def run_for(document, commands) -> Run:
    cluster, _ = load_with_uids(document, GPU_NODES, CPU_NODES)
    raw = {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster",
           "metadata": {"name": "research", "namespace": "hpc", "uid": "u1", "generation": 3}}
    return Run(raw=raw, cluster=cluster, slurm=SlurmControl(commands))


def test_known_users_is_one_getent_for_all_names():
    commands = Commands()
    assert SlurmControl(commands).known_users(["root", "nosuch-alice", "daemon"]) == {"root", "daemon"}
    assert commands.calls == [["getent", "passwd", "root", "nosuch-alice", "daemon"]]
    assert SlurmControl(commands).known_users([]) == set() and len(commands.calls) == 1


def test_passwd_lines_give_their_names():
    assert parse_passwd_names("alice:*:20001:20001:Alice:/home/alice:/bin/bash\nnoise\n") == {"alice"}


def test_missing_users_are_named_with_their_accounts_in_a_condition_and_an_event():
    commands, events, checks = Commands(), PostedEvents(), DirectoryChecks()
    run = run_for(set_path(LDAP, "spec.accounts", ACCOUNTS), commands)
    check_directory_users(events, checks, run)
    assert run.users_missing_from_directory == ["nosuch-alice", "nosuch-bob"]
    assert len(commands.calls) == 1 and sorted(commands.calls[0][2:]) == ["daemon", "nosuch-alice", "nosuch-bob", "root"]
    ((kind, reason, message),) = events.posted
    assert (kind, reason) == ("Warning", "UsersNotInDirectory")
    assert "nosuch-alice (account vision, nlp), nosuch-bob (account nlp)" in message
    (condition,) = [c for c in with_directory_users_condition([], run, 3) if c["type"] == ACCOUNT_USERS_CONDITION]
    assert condition["status"] == "False" and condition["reason"] == "UsersNotInDirectory"
    assert "nosuch-bob (account nlp)" in condition["message"] and condition["observedGeneration"] == 3


def test_while_users_are_missing_every_resync_asks_again_and_all_found_clears_the_condition():
    commands, events, checks = Commands(), PostedEvents(), DirectoryChecks()
    document = set_path(LDAP, "spec.accounts", ACCOUNTS)
    check_directory_users(events, checks, run_for(document, commands))
    check_directory_users(events, checks, run_for(document, commands))
    assert len(commands.calls) == 2
    fixed = set_path(LDAP, "spec.accounts", [{"name": "vision", "users": ["root", "daemon"]}])
    run = run_for(fixed, commands)
    check_directory_users(events, checks, run)
    assert run.users_missing_from_directory == []
    (condition,) = with_directory_users_condition([], run, 3)
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "AllUsersFound", "")


def test_a_steady_cluster_with_everyone_found_asks_again_only_after_the_recheck_time():
    now = [1000.0]
    commands, events = Commands(), PostedEvents()
    checks = DirectoryChecks(clock=lambda: now[0])
    document = set_path(LDAP, "spec.accounts", [{"name": "vision", "users": ["root"]}])
    for _ in range(3):
        check_directory_users(events, checks, run_for(document, commands))
    assert len(commands.calls) == 1
    now[0] += RECHECK_SECONDS
    check_directory_users(events, checks, run_for(document, commands))
    assert len(commands.calls) == 2 and not events.posted


def test_local_mode_asks_nothing_and_drops_the_condition():
    commands, events = Commands(), PostedEvents()
    run = run_for(set_path(CLUSTER, "spec.accounts", ACCOUNTS), commands)
    check_directory_users(events, DirectoryChecks(), run)
    assert not commands.calls and run.users_missing_from_directory is None
    old = [{"type": ACCOUNT_USERS_CONDITION, "status": "False"}, {"type": "Ready", "status": "True"}]
    assert with_directory_users_condition(old, run, 3) == [{"type": "Ready", "status": "True"}]


def test_without_an_answer_from_slurmctld_the_last_condition_stays():
    commands = Commands()
    run = run_for(set_path(LDAP, "spec.accounts", ACCOUNTS), commands)
    run.slurm = None
    check_directory_users(PostedEvents(), DirectoryChecks(), run)
    old = [{"type": ACCOUNT_USERS_CONDITION, "status": "False", "reason": "UsersNotInDirectory"}]
    assert with_directory_users_condition(old, run, 3) == old and not commands.calls


def test_a_user_who_appears_gets_a_reconfigure_so_slurmctld_maps_her_uid():
    commands, events, checks = Commands(), PostedEvents(), DirectoryChecks()
    document = set_path(LDAP, "spec.accounts", ACCOUNTS)
    check_directory_users(events, checks, run_for(document, commands))
    # "nosuch-alice" joins the directory: here, the name is swapped for one this machine knows
    key = ("hpc", "research")
    users, when, missing = checks.last[key]
    checks.last[key] = (users, when, missing + ("daemon",))
    check_directory_users(events, checks, run_for(document, commands))
    assert commands.calls[-1] == ["scontrol", "reconfigure"]
    assert events.posted[-1][:2] == ("Normal", "UsersAppearedInDirectory") and "daemon" in events.posted[-1][2]
    calls = len(commands.calls)
    check_directory_users(events, checks, run_for(document, commands))
    assert ["scontrol", "reconfigure"] not in commands.calls[calls:], "only once"
