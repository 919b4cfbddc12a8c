"""Does a live object already hold everything we want? (Then applying it would be a no-op write.)"""

from ..api.quantity import parse_quantity

# Maps whose values are resource quantities, which the API server rewrites in
# canonical form (1024Mi is stored as 1Gi).
_QUANTITY_MAPS = {"requests", "limits", "capacity"}


def _same_quantity(live, desired) -> bool:
    try:
        return parse_quantity(live) == parse_quantity(desired)
    except ValueError:
        return False


def contains(live, desired, quantities: bool = False) -> bool:
    """True when every field of `desired` is in `live` with the same value.

    The API server adds defaults and status, so live objects are supersets;
    lists must match item by item because their order means something.
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(
            key in live and contains(live[key], value, quantities or key in _QUANTITY_MAPS)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(contains(l, d) for l, d in zip(live, desired))
    if quantities and live != desired:
        return _same_quantity(live, desired)
    return live == desired
