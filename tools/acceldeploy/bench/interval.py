"""How sure a figure from a few repeated measurements is: a two-sided 90% Student-t interval
for the mean, and the same on paired differences (a point's run minus the run of the flags
it is compared with, measured in the same cycle).

Why t: it holds at N=3 when the noise is roughly symmetric, and it is honest about few runs
(at N=3 the half-width is 1.69 standard deviations). A bootstrap over three values has ten
distinct resamples, and a distribution-free interval cannot reach 90% at N=3 (the range of
three differences covers the median 75% of the time)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

LEVEL = 0.90
METHOD = f"{LEVEL:.0%} Student-t interval of the mean"
# The t quantile at 1 - (1 - LEVEL) / 2 = 0.95 for 1..30 degrees of freedom.
T_95 = (
    6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
    1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
    1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
)  # fmt: skip


def t_quantile(df: int) -> float:
    """Beyond the table the normal quantile (1.645; within 0.4% of t at df 31)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(T_95):
        return T_95[df - 1]
    return statistics.NormalDist().inv_cdf(1 - (1 - LEVEL) / 2)


@dataclass(frozen=True)
class Interval:
    """A figure over n runs: the median (what a typical run gives), the mean and the interval
    for the mean (low == high == the value when n is 1: one run says nothing of the noise)."""

    n: int
    median: float
    mean: float
    low: float
    high: float

    @property
    def known(self) -> bool:
        return self.n >= 2

    def above(self, value: float) -> bool:
        return self.known and self.low > value

    def below(self, value: float) -> bool:
        return self.known and self.high < value

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "median": self.median, "mean": self.mean,
                "low": self.low, "high": self.high}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interval:
        return cls(int(data["n"]), *(float(data[k]) for k in ("median", "mean", "low", "high")))


def single(value: float) -> Interval:
    return Interval(1, value, value, value, value)


def of(values: list[float]) -> Interval | None:
    """None without values."""
    if len(values) < 2:
        return single(values[0]) if values else None
    n, mean = len(values), statistics.fmean(values)
    half = t_quantile(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(n, statistics.median(values), mean, mean - half, mean + half)


def paired_gain(values: list[float | None], baseline: list[float | None]) -> Interval | None:
    """The interval of value - baseline over the pairs where both were measured."""
    return of(
        [v - b for v, b in zip(values, baseline, strict=True) if v is not None and b is not None]
    )


def apart(then: Interval, now: Interval) -> int:
    """+1 when now's interval lies wholly above then's, -1 wholly below, 0 when they overlap
    (a single run's interval is its value)."""
    return 1 if now.low > then.high else -1 if now.high < then.low else 0
