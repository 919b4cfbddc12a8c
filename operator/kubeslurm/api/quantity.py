"""Kubernetes resource quantities, parsed the way the API server reads them."""

import re
from decimal import Decimal

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"

_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

_PARSE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def parse_quantity(value: str | int) -> Decimal:
    """'32Gi' -> 34359738368, '500m' -> 0.5. Raises ValueError naming what is allowed."""
    match = _PARSE.match(str(value).strip())
    if not match:
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity; use a number with an optional "
            "suffix such as 8, 500m, 32Gi or 64G"
        )
    number, suffix = match.groups()
    return Decimal(number) * _SUFFIX[suffix or ""]


def to_mebibytes(value: str | int) -> int:
    return int(parse_quantity(value) // _SUFFIX["Mi"])


def to_whole_cpus(value: str | int) -> int:
    cpus = parse_quantity(value)
    if cpus != cpus.to_integral_value() or cpus < 1:
        raise ValueError(
            f"cpu {value!r} must be a whole number of CPUs (Slurm schedules whole CPUs), e.g. 8"
        )
    return int(cpus)
