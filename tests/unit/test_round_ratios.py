"""The scale benchmark's ratios over alternating rounds (benchmarks/round_ratios.py)."""

from __future__ import annotations

import pytest

from benchmarks.round_ratios import round_ratios

BARE = [{"up_s": 10.0, "down_s": 8.0}, {"up_s": 12.0, "down_s": 12.0},
        {"up_s": 14.0, "down_s": 10.0}, {"up_s": 10.0, "down_s": 14.0}]
MINE = [{"up_s": 11.0, "down_s": 13.0}, {"up_s": 26.0, "down_s": 11.0}, {"up_s": 12.0, "down_s": 12.0}]


def test_each_round_against_the_mean_of_the_bare_rounds_beside_it():
    down = round_ratios(MINE, BARE, "down_s")
    assert down.ratios == pytest.approx((13 / 10, 11 / 11, 12 / 12))
    assert down.median == pytest.approx(1.0)
    up = round_ratios(MINE, BARE, "up_s")
    assert up.ratios == pytest.approx((1.0, 2.0, 1.0))


def test_the_median_is_the_figure_and_names_its_round():
    """One slow round (the second scale-up's 2.0) does not make the figure."""
    up = round_ratios(MINE, BARE, "up_s")
    assert up.median == pytest.approx(1.0) and up.median_round in (0, 2)
    down = round_ratios(MINE, BARE, "down_s")
    assert MINE[down.median_round]["down_s"] in (11.0, 12.0)
    assert down.text() == "1.00x (median of 1.30, 1.00, 1.00)"


def test_two_rounds_name_the_lower_middle_one():
    two = round_ratios(MINE[:2], BARE[:3], "up_s")
    assert two.median == pytest.approx((11 / 11 + 26 / 13) / 2)
    assert two.median_round == 0


@pytest.mark.parametrize("bare", [BARE[:3], BARE + BARE[:1], []])
def test_every_round_needs_a_bare_round_on_either_side(bare):
    with pytest.raises(ValueError, match="bare rounds"):
        round_ratios(MINE, bare, "down_s")


def test_the_lower_middle_and_the_rounds_text():
    from benchmarks.round_ratios import lower_middle, rounds_text
    assert lower_middle([{"s": 3.0}, {"s": 1.0}, {"s": 2.0}], lambda r: r["s"]) == {"s": 2.0}
    assert lower_middle([{"s": 3.0}, {"s": 1.0}], lambda r: r["s"]) == {"s": 1.0}
    assert rounds_text([{"s": 5.25}, {"s": 6.4}], "s") == "5.2, 6.4 s"
