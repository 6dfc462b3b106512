"""The growth verdict of a service's memory, as `acceldeploy report` gives it: the test of the
growth alerts (monitor/rules.py), asked once at the end of a window, with their settings
(monitor_growth_window, monitor_growth_band_mib). The memory is growing when its lowest
reading of the last growth window sits above its highest of the window two windows back by
more than the noise band, with requests served in both windows; bounded when it does not;
not judged without readings or requests in either window. The states are bench's
(bench/verdict.py): a cache fills and stays bounded, a leak keeps growing."""

from __future__ import annotations

import math
from dataclasses import dataclass

from acceldeploy.monitor import rules
from acceldeploy.monitor.figures import text
from acceldeploy.monitor.promapi import Point


@dataclass(frozen=True)
class Growth:
    state: str  # growing | bounded | not judged
    # the lowest reading of the last window minus the highest two windows back, bytes
    rise: float | None
    band: float
    reason: str


def window_seconds(settings: rules.Settings) -> float:
    return rules.seconds(settings.growth_window, "monitor_growth_window")


def span_seconds(settings: rules.Settings) -> float:
    """How far back the verdict reads: three growth windows."""
    return 3 * window_seconds(settings)


def _within(points: list[Point], low: float, high: float) -> list[float]:
    return [v for t, v in points if low <= t <= high and math.isfinite(v)]


def judge(
    memory: list[Point],
    requests: list[Point],
    end: float,
    settings: rules.Settings,
    kind: str = "process",
) -> Growth:
    """`memory` in bytes and `requests` per second, both up to `end`; `kind`: process or
    device memory (its noise band)."""
    window = window_seconds(settings)
    band = float(settings.growth_band_mib[kind] * rules.MIB)
    last, then = (end - window, end), (end - 3 * window, end - 2 * window)
    named = (
        f"the last {rules.minutes(window)}",
        f"{rules.minutes(3 * window)} to {rules.minutes(2 * window)} ago",
    )
    lowest, highest = _within(memory, *last), _within(memory, *then)
    missing = [name for name, found in zip(named, (lowest, highest), strict=True) if not found]
    if missing:
        return Growth("not judged", None, band, f"no memory readings in {' or '.join(missing)}")
    idle = [name for name, span in zip(named, (last, then), strict=True)
            if not any(v > 0 for v in _within(requests, *span))]  # fmt: skip
    if idle:
        return Growth("not judged", None, band, f"no requests served in {' or '.join(idle)}")
    rise = min(lowest) - max(highest)
    direction = "above" if rise >= 0 else "below"
    compared = (
        f"its lowest reading of {named[0]} is {text(abs(rise), 'bytes')} {direction} "
        f"its highest from {named[1]}"
    )
    noise = f"noise band {text(band, 'bytes')}"
    if rise > band:
        return Growth("growing", rise, band, f"{compared}, under traffic ({noise})")
    return Growth("bounded", rise, band, f"{compared} ({noise})")
