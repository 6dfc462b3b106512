"""The duration syntaxes the roles hand straight to a program: HAProxy's times (roles/gateway:
gateway_timeouts, gateway_check.inter) and Prometheus's durations (roles/monitor:
monitor_scrape_interval, monitor_retention). A value the program would refuse, or read as
something else, is refused in preflight (bounds.py), naming the variable, rather than by
`haproxy -c` on a gateway mid-deploy or by a Prometheus that does not start."""

from __future__ import annotations

import re
from typing import Any

# HAProxy's parse_time_err: a whole number, then at most one unit (none: milliseconds).
HAPROXY_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000,
                    "d": 86_400_000}  # fmt: skip
HAPROXY = re.compile(r"(\d+)(us|ms|s|m|h|d)?")
# Its timers are signed 32-bit milliseconds: more is "timer overflow" (~24.8 days).
HAPROXY_MAX_MS = 2**31 - 1
HAPROXY_SYNTAX = (
    "whole milliseconds, or a whole number with one unit of us, ms, s, m, h or d, "
    "such as 5s or 10m, up to 2147483647 ms (24.8 days)"
)

# Prometheus's model.ParseDuration: whole numbers with units, largest first, each at most once.
PROMETHEUS_UNITS = (("y", 365 * 86400), ("w", 7 * 86400), ("d", 86400), ("h", 3600),
                    ("m", 60), ("s", 1), ("ms", 0.001))  # fmt: skip
PROMETHEUS = re.compile("".join(rf"(?:(\d+){unit})?" for unit, _ in PROMETHEUS_UNITS))
PROMETHEUS_SYNTAX = (
    "whole numbers with units y, w, d, h, m, s or ms, largest first, such as 15s, 15d or 1h30m"
)


def haproxy_ms(value: Any) -> float | None:
    """A HAProxy time (timeout, check interval) in milliseconds; None when HAProxy would
    refuse it (a fraction, a unit it lacks, a space, more than its timers hold)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    match = HAPROXY.fullmatch(str(value).strip())
    if match is None:
        return None
    ms = int(match[1]) * HAPROXY_UNITS_MS[match[2] or "ms"]
    return ms if ms <= HAPROXY_MAX_MS else None


def prometheus_seconds(value: Any) -> float | None:
    """A Prometheus duration in seconds; None when Prometheus would refuse it (a bare
    number, a fraction, a space, units out of order)."""
    text = value.strip() if isinstance(value, str) else ""
    match = PROMETHEUS.fullmatch(text)
    if not text or match is None:
        return None
    scales = (scale for _, scale in PROMETHEUS_UNITS)
    return sum(int(n) * scale for n, scale in zip(match.groups(), scales, strict=True) if n)
