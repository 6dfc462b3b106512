"""`acceldeploy top`: every service's live figures in one table (monitor/figures.py), with its
memory trend and the alerts about it. The figures come from the monitor's Prometheus, or,
where there is none, from each service's /metrics read directly (two readings make a rate;
p99 TTFT and memory need the monitor). The vLLM series are named as the inventory's stacks
name them: the fleet's (targets.series) from Prometheus, each service's own stack's from its
/metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acceldeploy.host.bench.driver import parse_metrics
from acceldeploy.monitor import figures, rules
from acceldeploy.monitor.figures import FIGURES

Key = tuple[str, str]  # (host, service)
COLUMNS = ("running", "waiting", "kv_cache", "prefix_hit", "requests", "tokens", "ttft_p99",
           "memory")  # fmt: skip
# the memory trend: its slope over this window, per hour
TREND_WINDOW = "15m"
TREND_QUERY = f"deriv({figures.BY_KEY['memory'].query}[{TREND_WINDOW}]) * 3600"
GROWTH_ALERTS = ("ServiceMemoryGrowing",)


@dataclass
class Snapshot:
    """One reading of the fleet: figures per service, alerts per host (and service)."""

    values: dict[Key, dict[str, float]] = field(default_factory=dict)
    alerts: dict[Key, list[str]] = field(default_factory=dict)
    at: float = 0.0


def _series_key(labels: Mapping[str, Any]) -> Key:
    return str(labels.get("host", "?")), str(labels.get("service", ""))


def from_prometheus(
    query: Any,
    alerts: list[dict[str, Any]],
    expected: list[Key],
    at: float,
    metrics: Mapping[str, str] = rules.DEFAULT_SERIES,
) -> Snapshot:
    """`query(promql)` -> Prometheus's instant vector; `alerts`: its /api/v1/alerts;
    `metrics`: the vLLM series' names ({role: name}, the fleet's stacks')."""
    snap = Snapshot(values={k: {} for k in expected}, at=at)
    slope = figures.Figure("trend", "", TREND_QUERY, "bytes")
    for figure in (*figures.figures(metrics), slope):
        for series in query(figure.query):
            key = _series_key(series["metric"])
            snap.values.setdefault(key, {})[figure.key] = float(series["value"][1])
    for alert in alerts:
        if alert.get("state") not in ("firing", "pending"):
            continue
        labels = alert.get("labels", {})
        key = _series_key(labels)
        name = str(labels.get("alertname", "?"))
        snap.alerts.setdefault(key, []).append(
            name if alert["state"] == "firing" else f"{name} (pending)"
        )
    return snap


def wanted(metrics: Mapping[str, str]) -> dict[str, str]:
    """{vLLM series: figure key} of the figures read from /metrics, named by `metrics`."""
    every = figures.figures(metrics)
    found = {f.metric: f.key for f in every if f.metric}
    return {**found, **{f.over: f"{f.key}_over" for f in every if f.over}}


def from_metrics(
    texts: Mapping[Key, str | None],
    previous: Snapshot | None,
    at: float,
    metrics: Mapping[Key, Mapping[str, str]] | None = None,
) -> Snapshot:
    """Each service's /metrics text (None: it did not answer); counters become rates against
    the previous reading. `metrics`: each service's vLLM series names (its stack's; vLLM
    0.12's where not given)."""
    snap = Snapshot(at=at)
    for key, text in texts.items():
        if text is None:
            snap.values[key] = {"up": 0.0}
            continue
        read = parse_metrics(text, wanted((metrics or {}).get(key) or rules.DEFAULT_SERIES))
        values = {"up": 1.0}
        for figure in FIGURES:
            if figure.key not in read:
                continue
            if not figure.counter:
                values[figure.key] = read[figure.key]
                continue
            values[f"{figure.key}_total"] = read[figure.key]
            if figure.over and f"{figure.key}_over" in read:
                values[f"{figure.key}_over_total"] = read[f"{figure.key}_over"]
            before = previous.values.get(key, {}) if previous else {}
            if f"{figure.key}_total" not in before or not previous or at <= previous.at:
                continue
            delta = max(read[figure.key] - before[f"{figure.key}_total"], 0.0)
            if not figure.over:
                values[figure.key] = delta / (at - previous.at)
                continue
            # a hit rate: this counter's rise over its `over` counter's, the same interval
            over_now = values.get(f"{figure.key}_over_total")
            over_then = before.get(f"{figure.key}_over_total")
            if over_now is not None and over_then is not None and over_now > over_then:
                values[figure.key] = delta / (over_now - over_then)
        snap.values[key] = values
    return snap


def rows(snap: Snapshot) -> list[list[str]]:
    """The table's cells: host, service, state, COLUMNS..., trend, alerts."""
    out = []
    for key in sorted(snap.values):
        host, service = key
        values = snap.values[key]
        state = "-" if "up" not in values else ("serving" if values["up"] >= 1 else "DOWN")
        cells = [cell(values.get(c), figures.BY_KEY[c].unit) for c in COLUMNS]
        alerts = [*snap.alerts.get(key, []), *snap.alerts.get((host, ""), [])]
        out.append(
            [host, service, state, *cells, trend(values.get("trend"), alerts), ", ".join(alerts)]
        )
    return out


def cell(value: float | None, unit: str) -> str:
    """A figure in the table: a rate without its "/s", which the column's header says."""
    found = figures.text(value, unit)
    return found.removesuffix("/s") if unit == "per_second" else found


def trend(per_hour: float | None, alerts: list[str]) -> str:
    if any(a.split(" ")[0] in GROWTH_ALERTS for a in alerts):
        return "growing"
    if per_hour is None or per_hour != per_hour:
        return "-"
    band = rules.BAND_DEFAULTS["process"] * rules.MIB
    if abs(per_hour) < band / 4:
        return "flat"
    size = figures.text(abs(per_hour), "bytes")
    number, unit = size.split(" ")
    if float(number) >= 10:  # whole units from 10 on: the row stays within 80 columns
        number = f"{float(number):.0f}"
    return f"{'+' if per_hour > 0 else '-'}{number} {unit}/h"


# a terminal's width: short headers, one line per service
SHORT = {"running": "run", "waiting": "wait", "kv_cache": "KV", "prefix_hit": "hit",
         "requests": "req/s",
         "tokens": "tok/s", "ttft_p99": "TTFT p99", "memory": "memory"}  # fmt: skip
HEADERS = ("host", "service", "state", *(SHORT[c] for c in COLUMNS), f"trend {TREND_WINDOW}",
           "alerts")  # fmt: skip


def table(snap: Snapshot, title: str) -> Any:
    """The view, within 80 columns: a borderless table, a row per service, then a line per
    alert under it."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    grid = Table(title=title, title_justify="left", box=None, collapse_padding=True,
                 pad_edge=False, header_style="bold")  # fmt: skip
    grid.add_column("service", no_wrap=True, overflow="ellipsis")
    for header in HEADERS[2:-1]:
        grid.add_column(header, no_wrap=True, justify="left" if header == "state" else "right")
    alerts = []
    for host, service, *cells, alerting in rows(snap):
        style = "bold red" if cells[0] == "DOWN" or alerting else None
        grid.add_row(f"{host}/{service}", *cells, style=style)
        if alerting:
            alerts.append(Text(f"{host}/{service}: {alerting}", style="bold red"))
    return Group(grid, *alerts) if alerts else grid
