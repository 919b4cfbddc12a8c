"""Which uid each Unix user of spec.accounts gets: collision-free, and never changed once given.

The reconcile keeps the assignment in `status.unixIds` (user name -> uid) and passes it to
render; render only reads it. The rule, applied by `assign_unix_ids`:

- a user in the assignment keeps its uid forever, whatever else changes in the spec;
- a user not in it gets its preferred uid, FIRST_UID + a sha256 of its name modulo
  UID_SLOTS, or, when another user (present or removed) holds that uid, the next free one
  above it (wrapping at the end of the range). New users are taken in name order, so one
  spec and one assignment always give the same result;
- a removed user stays in the assignment, so its uid is never given to anyone else: a new
  user never inherits a departed user's files on shared storage, and a user who comes back
  gets its own files back. The range holds 900,000 uids; the table only grows by the users
  a cluster has ever named.

Migration from the hash-only rule (kubeslurm before status.unixIds): that rule gave each
user of the spec FIRST_UID + its hash slot, and on a collision the later name in sort order
took the next free slot. The rule above, started from an empty assignment, gives exactly
those uids for the same spec, so the first reconcile after the upgrade records the uids the
running pods already use and every file keeps its owner. Only users added from then on can
differ: where the old rule would have moved an existing user (a new name colliding with
`zoe` and sorting before it took zoe's uid), the new one keeps zoe and moves the newcomer.

Offline (`kubeslurm render`, no status): the assignment for the spec alone, the same as a
new cluster's first reconcile; a running cluster may have given later users other uids.
"""

import hashlib
from collections.abc import Iterable, Mapping
from functools import lru_cache

# Far from the uids images and sites use (system < 1000, people 1000-59999, slurm 64030,
# nobody 65534) and below 2^31 (some tools read uids as signed 32-bit numbers).
FIRST_UID = 100_000
UID_SLOTS = 900_000
LAST_UID = FIRST_UID + UID_SLOTS - 1

STATUS_FIELD = "status.unixIds"


class UnixIdsError(ValueError):
    """The recorded assignment cannot be trusted (edited by hand, or corrupted)."""


def preferred_uid(name: str) -> int:
    """The uid a new user gets when nobody holds it: the hash-only rule's uid."""
    return FIRST_UID + int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % UID_SLOTS


def assign_unix_ids(user_names: Iterable[str], assigned: Mapping[str, int] | None = None) -> dict[str, int]:
    """The whole assignment after adding `user_names` to `assigned`: every entry of
    `assigned` unchanged, plus one new uid for each name it lacks. Sorted by name."""
    return dict(_assign(tuple(sorted(set(user_names))), _frozen(assigned)))


def uids_of_users(user_names: Iterable[str], assigned: Mapping[str, int] | None = None) -> tuple[tuple[str, int], ...]:
    """(name, uid) of exactly `user_names`, sorted by name, from the assignment completed with them."""
    names = tuple(sorted(set(user_names)))
    complete = dict(_assign(names, _frozen(assigned)))
    return tuple((name, complete[name]) for name in names)


def _frozen(assigned: Mapping[str, int] | None) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(assigned.items())) if assigned else ()


# Keyed on values: a reconcile renders the same users and assignment every time, and
# every pod template of one render asks for them.
@lru_cache(maxsize=16)
def _assign(names: tuple[str, ...], assigned: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    check_assignment(dict(assigned))
    result = dict(assigned)
    taken = set(result.values())
    for name in names:
        if name in result:
            continue
        if len(taken) >= UID_SLOTS:
            raise UnixIdsError(f"{STATUS_FIELD}: all {UID_SLOTS} uids from {FIRST_UID} are given; no uid left for {name!r}")
        uid = preferred_uid(name)
        while uid in taken:
            uid = FIRST_UID if uid == LAST_UID else uid + 1
        taken.add(uid)
        result[name] = uid
    return tuple(sorted(result.items()))


def check_assignment(assigned: Mapping[str, int]) -> None:
    """Refuse an assignment that would give two users one uid, or a uid outside the range."""
    holder: dict[int, str] = {}
    for name, uid in sorted(assigned.items()):
        if not FIRST_UID <= uid <= LAST_UID:
            raise UnixIdsError(
                f"{STATUS_FIELD}.{name}: uid {uid} is outside {FIRST_UID}-{LAST_UID}; "
                f"restore the value the operator recorded (the owner of /home/{name} in a Slurm pod)"
            )
        if uid in holder:
            raise UnixIdsError(
                f"{STATUS_FIELD}: {holder[uid]!r} and {name!r} both have uid {uid}; "
                "restore the value the operator recorded for one of them (the owner of its home directory)"
            )
        holder[uid] = name
