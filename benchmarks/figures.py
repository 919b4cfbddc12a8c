"""One row of `make bench`'s table: a figure, its target, kubeslurm's value, the reference it is
compared with, their ratio, and whether the target is met.

Each benchmark script prints its figures as JSON (`--json`: {"figures": [...]}) so that
benchmarks/run_all.py can run every part, even after one misses a target, and print one table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Figure:
    figure: str
    target: str = "-"  # e.g. "<= 10 ms", "<= 1.5x"; "-": shown for information
    kubeslurm: str = "-"
    reference: str = "-"  # what kubeslurm is compared with, and its value
    ratio: str = "-"
    met: bool | None = None  # None: no target, or not measured
    measured: bool = True

    @classmethod
    def not_measured(cls, figure: str, why: str) -> "Figure":
        return cls(figure, kubeslurm=f"not measured: {why}", measured=False)


def ratio_text(value: float) -> str:
    return f"{value:.2f}x"


def dump(figures: list[Figure]) -> str:
    return json.dumps({"figures": [asdict(f) for f in figures]})


def load(text: str) -> list[Figure]:
    """The figures of the last JSON line of a benchmark's stdout."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return [Figure(**f) for f in json.loads(line)["figures"]]
    raise ValueError("no {\"figures\": ...} line in the output")


def table(figures: list[Figure]) -> str:
    """Markdown, readable in a terminal and pasteable into the README."""
    rows = [("figure", "target", "kubeslurm", "reference", "ratio", "met")]
    for f in figures:
        met = "-" if f.met is None else ("yes" if f.met else "NO")
        rows.append((f.figure, f.target, f.kubeslurm, f.reference, f.ratio, met))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
