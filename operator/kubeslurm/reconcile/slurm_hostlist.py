"""Slurm's compressed host lists (`cpu-[0-2,5],h100-01`) expanded in Python.

squeue and scontrol print node lists compressed. Expanding them here instead of
running `scontrol show hostnames` once per job keeps a reconcile to one squeue
call however many jobs run; the real-Slurm tier checks both agree.
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
