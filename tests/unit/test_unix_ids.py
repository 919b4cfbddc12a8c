"""Unix uid assignment (render/unix_ids.py): collision-free, and a user keeps its uid forever."""

import hashlib
import random

import pytest

from kubeslurm.render.unix_ids import FIRST_UID, LAST_UID, UID_SLOTS, UnixIdsError, assign_unix_ids, preferred_uid, uids_of_users

# Two names whose hashes meet (both prefer this uid), and one that prefers the last uid.
ZOE_UID = 869_815
assert preferred_uid("zoe") == preferred_uid("a3219") == ZOE_UID
assert preferred_uid("w66984") == LAST_UID


def hash_only_rule(names: list[str]) -> dict[str, int]:
    """The uids kubeslurm gave before the assignment was recorded (slurm_pod._uids_of, verbatim)."""
    taken: set[int] = set()
    uids = {}
    for name in sorted(set(names)):
        slot = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % UID_SLOTS
        while slot in taken:
            slot = (slot + 1) % UID_SLOTS
        taken.add(slot)
        uids[name] = FIRST_UID + slot
    return uids


@pytest.mark.parametrize("names", [
    [],
    ["alice", "bob"],
    ["zoe", "a3219"],                                  # a collision: the earlier name keeps the slot
    ["w66984", "alice"],                               # the last uid of the range
    [f"user{i}" for i in range(1000)],
])
def test_from_nothing_the_assignment_is_the_hash_only_rule_so_an_upgrade_keeps_every_owner(names):
    assert assign_unix_ids(names) == hash_only_rule(names)


@pytest.mark.parametrize("assigned, names, expected", [
    # a user keeps its uid, whatever the spec
    ({"alice": FIRST_UID + 5}, ["alice"], {"alice": FIRST_UID + 5}),
    # the collision the hash-only rule got wrong: a3219 sorts before zoe and took its uid
    ({"zoe": ZOE_UID}, ["a3219", "zoe"], {"a3219": ZOE_UID + 1, "zoe": ZOE_UID}),
    # zoe left the spec: her uid stays hers, the newcomer does not inherit her files
    ({"zoe": ZOE_UID}, ["a3219"], {"a3219": ZOE_UID + 1, "zoe": ZOE_UID}),
    # the next free uid skips every taken one
    ({"zoe": ZOE_UID, "x": ZOE_UID + 1, "y": ZOE_UID + 2}, ["a3219"],
     {"a3219": ZOE_UID + 3, "x": ZOE_UID + 1, "y": ZOE_UID + 2, "zoe": ZOE_UID}),
    # past the last uid the search wraps to the first
    ({"taken": LAST_UID}, ["w66984"], {"taken": LAST_UID, "w66984": FIRST_UID}),
    # new users arrive in name order: the same spec and table give the same answer
    ({}, ["zoe", "a3219"], {"a3219": ZOE_UID, "zoe": ZOE_UID + 1}),
])
def test_assignment_table(assigned, names, expected):
    assert assign_unix_ids(names, assigned) == expected
    assert list(assign_unix_ids(names, assigned)) == sorted(expected)


def test_uids_of_users_names_only_the_users_asked_for():
    assigned = {"zoe": ZOE_UID, "gone": FIRST_UID}
    assert uids_of_users(["a3219", "bob", "bob"], assigned) == (("a3219", ZOE_UID + 1), ("bob", preferred_uid("bob")))


def test_uids_never_move_and_are_never_shared_across_a_thousand_adds_and_removes():
    rng = random.Random(11)
    recorded: dict[str, int] = {}
    spec: set[str] = set()
    for step in range(300):
        spec |= {f"u{rng.randrange(5000)}" for _ in range(rng.randrange(1, 8))}
        spec -= set(rng.sample(sorted(spec), k=min(len(spec), rng.randrange(0, 4))))
        table = assign_unix_ids(spec, recorded)
        assert {name: table[name] for name in recorded} == recorded, step
        assert len(set(table.values())) == len(table), step
        assert all(FIRST_UID <= uid <= LAST_UID for uid in table.values())
        recorded = table
    assert len(recorded) > 1000


@pytest.mark.parametrize("assigned, message", [
    ({"alice": 1000}, "status.unixIds.alice: uid 1000 is outside 100000-999999"),
    ({"alice": FIRST_UID + UID_SLOTS}, "status.unixIds.alice: uid 1000000 is outside"),
    ({"alice": FIRST_UID, "bob": FIRST_UID}, "status.unixIds: 'alice' and 'bob' both have uid 100000"),
])
def test_an_assignment_that_would_share_or_leave_the_range_is_refused_naming_the_field(assigned, message):
    with pytest.raises(UnixIdsError, match=message.replace(".", r"\.")):
        assign_unix_ids(["carol"], assigned)


def test_pod_templates_take_the_uids_of_the_recorded_assignment():
    from kubeslurm.render.cluster_objects import node_set_objects
    from kubeslurm.render.login.statefulset import login_stateful_set
    from kubeslurm.render.slurm_pod import unix_users, unix_users_config_map, users_digest

    from .manifests import contract_documents, load_with_uids, set_path

    cluster_doc, gpu_nodes, _ = contract_documents()
    cluster_doc = set_path(cluster_doc, "spec.accounts", [{"name": "vision", "users": ["alice", "a3219"]}])
    cluster, [node_set] = load_with_uids(cluster_doc, gpu_nodes)
    recorded = {"alice": FIRST_UID + 7, "zoe": ZOE_UID}  # zoe was removed from the spec earlier
    users = unix_users(cluster, recorded)
    assert users == (("a3219", ZOE_UID + 1), ("alice", FIRST_UID + 7))
    slurmd = node_set_objects(cluster, node_set, users=users)[1]
    login = login_stateful_set(cluster, users=users)
    table = unix_users_config_map(cluster, users)["data"]["users"]
    assert table == f"a3219 {ZOE_UID + 1}\nalice {FIRST_UID + 7}\n"  # zoe's uid stays hers, zoe is not there
    for statefulset in (slurmd, login):
        script = statefulset["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]
        assert f"# the users of table {users_digest(users)} " in script
    # without a recorded assignment: the spec's own (what offline render shows)
    assert unix_users(cluster) == (("a3219", ZOE_UID), ("alice", preferred_uid("alice")))


class StatusPatches:
    def __init__(self):
        self.patches = []

    def patch_status(self, kind, namespace, name, status):
        self.patches.append((kind.kind, namespace, name, status))


def test_the_reconcile_records_new_users_before_render_and_writes_nothing_when_none_is_new():
    from kubeslurm.reconcile.record_unix_ids import record_unix_ids
    from kubeslurm.reconcile.run_state import Run

    from .manifests import contract_documents, load_with_uids, set_path

    cluster_doc = set_path(contract_documents()[0], "spec.accounts", [{"name": "vision", "users": ["alice", "a3219"]}])
    cluster, *_ = load_with_uids(cluster_doc)
    api = StatusPatches()
    run = Run(raw={**cluster_doc, "status": {"unixIds": {"zoe": ZOE_UID}, "nodes": 3}}, cluster=cluster)
    record_unix_ids(api, run)
    expected = {"a3219": ZOE_UID + 1, "alice": preferred_uid("alice"), "zoe": ZOE_UID}
    assert api.patches == [("SlurmCluster", "hpc", "research", {"unixIds": expected})]
    assert run.unix_ids == expected and run.raw["status"] == {"unixIds": expected, "nodes": 3}

    again = Run(raw={**cluster_doc, "status": {"unixIds": expected}}, cluster=cluster)
    record_unix_ids(api, again)
    assert len(api.patches) == 1 and again.unix_ids == expected

    edited = Run(raw={**cluster_doc, "status": {"unixIds": {"alice": ZOE_UID, "zoe": ZOE_UID}}}, cluster=cluster)
    with pytest.raises(UnixIdsError, match="status.unixIds: 'alice' and 'zoe' both have uid 869815"):
        record_unix_ids(api, edited)
    assert len(api.patches) == 1


def test_offline_render_shows_the_uids_and_says_they_are_for_the_spec_alone(capsys):
    from kubeslurm.cli import main

    from .manifests import EXAMPLE

    assert main(["render", "-f", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "# ---- hpc/research: uids of the account users ----" in out
    assert "for this spec alone: a running cluster uses the uids recorded in its status.unixIds" in out
    assert f"# alice={preferred_uid('alice')} bob={preferred_uid('bob')}\n" in out
