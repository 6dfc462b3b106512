"""The statistics tune and bench decide with (bench/interval.py) on synthetic runs, and the
numbers they print (bench/formatting.py)."""

from __future__ import annotations

import math

import pytest

from acceldeploy.bench import formatting, interval


def t_cdf_above_zero(q: float, df: int, steps: int = 20_000) -> float:
    """P(0 < T < q) for Student's t, by Simpson's rule on its density."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    h = q / steps
    f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(steps + 1)]
    return h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 30])
def test_t_table_is_the_95th_percentile(df):
    assert t_cdf_above_zero(interval.t_quantile(df), df) == pytest.approx(0.45, abs=5e-4)


def test_beyond_the_table_the_normal_quantile():
    assert interval.t_quantile(31) == pytest.approx(1.6449, abs=1e-4)
    with pytest.raises(ValueError):
        interval.t_quantile(0)


def test_three_runs_interval_by_hand():
    found = interval.of([10.0, 12.0, 14.0])
    assert found is not None and found.n == 3 and found.median == 12.0
    # mean 12, s 2, half-width 2.920 * 2 / sqrt(3)
    assert (found.low, found.high) == pytest.approx((12 - 3.3717, 12 + 3.3717), abs=1e-3)


def test_one_run_is_no_interval_and_none_is_nothing():
    one = interval.of([5.0])
    assert one is not None and not one.known and (one.low, one.high) == (5.0, 5.0)
    assert not one.above(0.0) and not one.below(10.0)
    assert interval.of([]) is None


def test_a_clear_winner_clears_zero():
    deployed = [8.1, 9.8, 8.8]
    point = [24.0, 25.9, 24.4]
    gain = interval.paired_gain(point, deployed)
    assert gain is not None and gain.above(0.0) and gain.low > 10


def test_a_tie_a_a_does_not():
    deployed = [15.4, 24.4, 19.0]  # a loaded cycle, a quiet one
    same = [15.9, 23.8, 19.3]
    gain = interval.paired_gain(same, deployed)
    assert gain is not None and gain.low < 0 < gain.high
    assert not gain.above(0.0) and not gain.below(0.0)


def test_noise_wider_than_the_gap_is_not_a_win():
    deployed = [10.0, 10.0, 10.0]
    point = [9.0, 16.0, 11.0]  # a mean gain of 2, noise of +-3.5
    gain = interval.paired_gain(point, deployed)
    assert gain is not None and gain.mean == pytest.approx(2.0) and not gain.above(0.0)


def test_pairing_takes_out_the_shared_noise():
    """The load moves both sides of a cycle: unpaired, the intervals overlap; paired, the gain
    is clear."""
    deployed = [10.0, 20.0, 14.0]
    point = [11.0, 21.2, 15.1]
    a, b = interval.of(deployed), interval.of(point)
    assert a is not None and b is not None and interval.apart(a, b) == 0
    gain = interval.paired_gain(point, deployed)
    assert gain is not None and gain.above(0.0)


def test_pairs_missing_a_side_are_left_out():
    gain = interval.paired_gain([5.0, None, 7.0], [4.0, 4.0, None])
    assert gain is not None and gain.n == 1 and not gain.known


def test_apart_says_which_side():
    low, high = interval.of([1.0, 1.1, 0.9]), interval.of([3.0, 3.1, 2.9])
    assert low is not None and high is not None
    assert interval.apart(low, high) == 1 and interval.apart(high, low) == -1
    assert interval.apart(low, low) == 0


@pytest.mark.parametrize(
    ("value", "text"),
    [(24.4, "24.4"), (9.7904, "9.79"), (0.45, "0.45"), (2457.3, "2,460"), (0.0371, "0.0371"),
     (6459.0, "6,460"), (0.0, "0"), (None, "-"), (-3.14159, "-3.14"), (1e-7, "0.0000001")],
)  # fmt: skip
def test_three_significant_figures_without_an_exponent(value, text):
    assert formatting.significant(value) == text


def test_mib_percent_and_intervals_for_people():
    assert formatting.mib(2457.6) == "2,458" and formatting.mib(-64.0, sign=True) == "-64"
    assert formatting.percent(0.00037) == "0.037%" and formatting.percent(0.5) == "50%"
    assert formatting.percent(0.1234) == "12.3%"
    found = interval.of([10.0, 12.0, 14.0])
    assert formatting.spread(found) == "12 [8.63, 15.4]"
    assert formatting.spread(found, number="mib") == "12 [9, 15]"
    assert formatting.spread(interval.of([2.0, 3.0]), sign=True) == "+2.5 [-0.657, +5.66]"
    assert formatting.spread(interval.of([7.0])) == "7" and formatting.spread(None) == "-"
