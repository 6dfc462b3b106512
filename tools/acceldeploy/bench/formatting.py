"""Numbers for people, the same in bench's and tune's tables: MiB whole with thousands
separators, rates and latencies to 3 significant figures, shares as percentages with the
digits they need (0.037%, not 0.0%), intervals as `median [low, high]`."""

from __future__ import annotations

import math

from acceldeploy.bench.interval import Interval

NONE = "-"


def significant(value: float | None, digits: int = 3, sign: bool = False) -> str:
    """24.4, 9.79, 0.0371, 6,460: never an exponent."""
    if value is None:
        return NONE
    if value == 0 or not math.isfinite(value):
        return f"{value:+g}" if sign else f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    rounded = round(value, digits - 1 - magnitude)
    decimals = max(0, digits - 1 - magnitude)
    text = f"{rounded:{'+' if sign else ''},.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def mib(value: float | None, sign: bool = False) -> str:
    if value is None:
        return NONE
    return f"{value:{'+' if sign else ''},.0f}"


def percent(share: float | None) -> str:
    """A share (0..1) as a percentage."""
    return NONE if share is None else f"{significant(100 * share)}%"


def spread(interval: Interval | None, number: str = "significant", sign: bool = False) -> str:
    """`median [low, high]`; the median alone from a single run. `number`: significant or mib."""
    if interval is None:
        return NONE
    one = mib if number == "mib" else significant
    median = one(interval.median, sign=sign)
    if not interval.known:
        return median
    return f"{median} [{one(interval.low, sign=sign)}, {one(interval.high, sign=sign)}]"
