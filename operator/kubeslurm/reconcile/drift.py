"""Does a live object already hold everything we want? (Then applying it would be a no-op write.)"""


def contains(live, desired) -> bool:
    """True when every field of `desired` is in `live` with the same value.

    The API server adds defaults and status, so live objects are supersets;
    lists must match item by item because their order means something.
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(key in live and contains(live[key], value) for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(contains(l, d) for l, d in zip(live, desired))
    return live == desired
