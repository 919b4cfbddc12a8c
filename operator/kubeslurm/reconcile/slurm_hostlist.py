"""Slurm's compressed host lists (`cpu-[0-2,5],h100-01`) expanded and made in Python.

squeue and scontrol print node lists compressed. Expanding them here instead of
running `scontrol show hostnames` once per job keeps a reconcile to one squeue
call however many jobs run; the real-Slurm tier checks both agree. The other way,
`compress` turns the 1000 node names of one scontrol command into `cpu-[0-999]`.
"""

import itertools
import re

_TOKEN = re.compile(r"\[([^\]]*)\]")


def _split_top_level(hostlist: str) -> list[str]:
    """Commas separate hosts except inside brackets."""
    parts, depth, current = [], 0, []
    for char in hostlist:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part]


def _range_values(spec: str) -> list[str]:
    values = []
    for item in spec.split(","):
        first, _, last = item.partition("-")
        if not last:
            values.append(first)
            continue
        width = len(first)  # "01-10" keeps its zero padding
        values += [str(n).zfill(width) for n in range(int(first), int(last) + 1)]
    return values


def expand(hostlist: str) -> list[str]:
    hosts: list[str] = []
    for part in _split_top_level(hostlist.strip()):
        pieces = _TOKEN.split(part)  # literal, range, literal, range, ..., literal
        choices = [[piece] if i % 2 == 0 else _range_values(piece) for i, piece in enumerate(pieces)]
        hosts += ["".join(combo) for combo in itertools.product(*choices)]
    return hosts


_NUMBERED = re.compile(r"^(.*?)(0|[1-9][0-9]*)$")  # a zero-padded number stays literal


def compress(hosts) -> str:
    """The hostlist Slurm reads as exactly `hosts`: `cpu-[0-3,7],h100-0,login`; expand() undoes it."""
    numbered: dict[str, set[int]] = {}
    literal: set[str] = set()
    for host in hosts:
        match = _NUMBERED.match(host)
        if match and "[" not in host and "," not in host:
            numbered.setdefault(match.group(1), set()).add(int(match.group(2)))
        else:
            literal.add(host)
    parts = sorted(literal)
    for prefix, numbers in sorted(numbered.items()):
        ranges, ordered = [], sorted(numbers)
        start = previous = ordered[0]
        for number in ordered[1:] + [None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
            if number is not None:
                start = previous = number
        parts.append(f"{prefix}{ranges[0]}" if len(ordered) == 1 else f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)
