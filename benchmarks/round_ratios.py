"""A scale's ratio to the bare StatefulSets over alternating rounds (benchmarks/scale_bench.py).

One round of 1000 pods on this 2-core machine is noisy: the bare scale-down took 8.6-15.9 s in
runs of the same code, and one round's ratio moved by 0.3 between runs. The benchmark so runs
rounds that alternate (bare StatefulSets up and down, then the NodeSets up and down, ..., a last
bare round) and checks the target against the median of the rounds' ratios.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def lower_middle(items: Sequence[T], key: Callable[[T], float]) -> T:
    """The item whose key is the median (an even count: the lower of the two middle ones), whole:
    a round's timeline goes with its figure."""
    return sorted(items, key=key)[(len(items) - 1) // 2]


def rounds_text(rounds: Sequence[dict], key: str) -> str:
    """"19.3, 18.8, 20.1 s": each round's `key`, in the rounds' order."""
    return ", ".join(f"{r[key]:.1f}" for r in rounds) + " s"


@dataclass(frozen=True)
class RoundRatios:
    """A scale's ratio in each round, against the bare StatefulSets' rounds beside it, and the
    median of them: the figure compared with the target."""
    ratios: tuple[float, ...]
    median: float
    median_round: int  # the round (from 0) whose ratio is the median: its timeline is shown

    def text(self) -> str:
        return f"{self.median:.2f}x (median of {', '.join(f'{x:.2f}' for x in self.ratios)})"


def round_ratios(rounds: list[dict], bare: list[dict], key: str) -> RoundRatios:
    """`key` ("up_s", "down_s") of each NodeSet round against the mean of the bare rounds just
    before and just after it: the control plane grows slower as the run goes (its stores carry
    every pod made and deleted), so a single neighbour would favour one side. `bare` holds one
    round more than `rounds` (the last, after the last NodeSet round)."""
    if not rounds or len(bare) != len(rounds) + 1:
        raise ValueError(f"{len(rounds)} NodeSet rounds need {len(rounds) + 1} bare rounds, not {len(bare)}")
    ratios = [mine[key] / ((bare[i][key] + bare[i + 1][key]) / 2) for i, mine in enumerate(rounds)]
    return RoundRatios(tuple(ratios), statistics.median(ratios), lower_middle(range(len(ratios)), ratios.__getitem__))
