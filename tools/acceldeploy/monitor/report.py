"""`acceldeploy report`: what the fleet did over a window, from the monitor's Prometheus. One
PNG per figure of figures.FIGURES (a line per host/service; where a series has no data, a
killed service, its line breaks), series.json (the points plotted) and index.html: the plots
inlined, and a row per service with its figures at the window's end and the growth verdict
of its memory (monitor/growth.py)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acceldeploy import plots
from acceldeploy.monitor import growth, rules
from acceldeploy.monitor.figures import BY_KEY, FIGURES, Figure, figures, text
from acceldeploy.monitor.promapi import Api, Point, step_for

Key = tuple[str, str]  # (host, service): one series of a figure
# How each unit is drawn: the y axis's label and the factor from the figure's values.
AXES = {"count": ("", 1.0), "ratio": ("%", 100.0), "per_second": ("per second", 1.0),
        "seconds": ("seconds", 1.0), "bytes": ("MiB", 1.0 / rules.MIB)}  # fmt: skip
# Step plots: a figure that only takes whole values, shown as the level it held (`up` has its
# own lanes).
STEPPED = ("running", "waiting")


@dataclass(frozen=True)
class Window:
    start: float  # unix seconds
    end: float

    @property
    def step(self) -> int:
        return step_for(self.end - self.start)

    def text(self) -> str:
        return f"{_utc(self.start)} to {_utc(self.end)} UTC"


@dataclass(frozen=True)
class Report:
    base: str
    window: Window
    series: Mapping[str, Mapping[Key, list[Point]]]  # figure key -> its series
    growth: Mapping[Key, growth.Growth]
    settings: rules.Settings

    def services(self) -> list[Key]:
        return sorted({key for found in self.series.values() for key in found} | set(self.growth))


def _datetime(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


def _utc(at: float) -> str:
    return _datetime(at).strftime("%Y-%m-%d %H:%M")


def key_of(labels: Mapping[str, str]) -> Key:
    return labels.get("host", "?"), labels.get("service", "?")


def fetch(
    base: str, promql: str, start: float, end: float, timeout: float
) -> dict[Key, list[Point]]:
    found = Api(base, timeout).query_range(promql, start, end, step_for(end - start))
    return {key_of(series.labels): series.points for series in found}


def collect(
    base: str,
    window: Window,
    settings: rules.Settings,
    timeout: float = 30.0,
    asking: Callable[[str], None] = lambda title: None,
) -> Report:
    """Every figure over the window (its vLLM series named by the settings' metrics), then
    memory and requests over the verdict's span (three growth windows up to the window's end,
    at their own finer step)."""
    series = {}
    for figure in figures(settings.metrics):
        asking(figure.title)
        series[figure.key] = fetch(base, figure.query, window.start, window.end, timeout)
    asking("memory growth")
    since = window.end - growth.span_seconds(settings)
    memory = fetch(base, BY_KEY["memory"].query, since, window.end, timeout)
    requests = fetch(base, BY_KEY["requests"].query, since, window.end, timeout)
    verdicts = {key: growth.judge(points, requests.get(key, []), window.end, settings)
                for key, points in memory.items()}  # fmt: skip
    return Report(base, window, series, verdicts, settings)


def with_gaps(points: list[Point], step: float) -> tuple[list[float], list[float]]:
    """The points as x and y, a NaN wherever two are more than a step apart: matplotlib breaks
    the line there rather than drawing across a time with no data."""
    xs: list[float] = []
    ys: list[float] = []
    for t, v in points:
        if xs and t - xs[-1] > 1.5 * step:
            xs.append((xs[-1] + t) / 2)
            ys.append(math.nan)
        xs.append(t)
        ys.append(v)
    return xs, ys


def down_spans(points: list[Point], step: float) -> list[tuple[float, float]]:
    """Where `up` read 0: from the first such reading to the next one that is not (or a step
    past the last)."""
    spans: list[tuple[float, float]] = []
    began: float | None = None
    for t, v in points:
        if v == 0 and began is None:
            began = t
        elif v != 0 and began is not None:
            spans.append((began, t))
            began = None
    if began is not None:
        spans.append((began, points[-1][0] + step))
    return spans


def latest(points: list[Point], window: Window) -> float | None:
    """The reading at the window's end: none when the series had stopped before it."""
    if not points or points[-1][0] < window.end - window.step:
        return None
    value = points[-1][1]
    return value if math.isfinite(value) else None


STEP_STYLES = ("-", "--", ":", "-.")
# `up` draws each service in a lane of its own: serving is its lane's top, down its floor.
LANE_HEIGHT = 0.7


def _lanes(ax: Any, report: Report, services: list[Key]) -> None:
    """The `up` figure: one lane per service, first at the top, so no line hides another's;
    a down span shaded in its own lane only."""
    found = sorted(report.series["up"].items())
    for lane, (key, points) in enumerate(found):
        base = len(found) - 1 - lane
        colour = f"C{services.index(key) % 10}"
        xs, ys = with_gaps(points, report.window.step)
        when = [_datetime(x) for x in xs]
        ax.step(when, [base + LANE_HEIGHT * y for y in ys], where="post", color=colour,
                linewidth=2)  # fmt: skip
        for i, (left, right) in enumerate(down_spans(points, report.window.step)):
            ax.fill_between([_datetime(left), _datetime(right)], base, base + LANE_HEIGHT,
                            color=colour, alpha=0.2,
                            label=None if i else f"{'/'.join(key)} down")  # fmt: skip
    ax.set_yticks([len(found) - 1 - lane + LANE_HEIGHT / 2 for lane in range(len(found))],
                  ["/".join(key) for key, _ in found])  # fmt: skip
    ax.set_ylim(-0.2, max(len(found), 1) + 0.4)  # room above the lanes for the legend
    ax.set_ylabel("high: serving; low: down")


def _lines(ax: Any, report: Report, figure: Figure, services: list[Key]) -> None:
    """Every figure but `up`: a line per service, each service's down spans shaded across."""
    label, factor = AXES[figure.unit]
    for turn, (key, points) in enumerate(sorted(report.series[figure.key].items())):
        colour = f"C{services.index(key) % 10}"
        xs, ys = with_gaps(points, report.window.step)
        when = [_datetime(x) for x in xs]
        name = "/".join(key)
        if figure.key == "memory" and key in report.growth:
            name += f" ({report.growth[key].state})"
        values = [y * factor for y in ys]
        if figure.key in STEPPED:
            # Stepped series (running, waiting: whole numbers) lie on each other: each next one
            # thinner and dashed differently, so every host's line shows where they coincide.
            ax.step(when, values, where="post", label=name, color=colour,
                    linewidth=max(1.0, 5.0 - 1.5 * turn),
                    linestyle=STEP_STYLES[turn % len(STEP_STYLES)])  # fmt: skip
        else:
            ax.plot(when, values, label=name, color=colour)
    for key, points in sorted(report.series["up"].items()):
        colour = f"C{services.index(key) % 10}"
        for i, (left, right) in enumerate(down_spans(points, report.window.step)):
            ax.axvspan(_datetime(left), _datetime(right), color=colour, alpha=0.2,
                       label=None if i else f"{'/'.join(key)} down")  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.set_ylabel(label)


def figure_for(report: Report, figure: Figure) -> Any:
    """The figure's plot over the window: a break where a series had no data; `up` in lanes."""
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    if figure.key == "up":
        _lanes(ax, report, report.services())
    else:
        _lines(ax, report, figure, report.services())
    ax.set_xlim(_datetime(report.window.start), _datetime(report.window.end))
    ax.set_xlabel("UTC")
    ax.set_title(f"{figure.title}: {report.window.text()}", fontsize=10)
    if report.series[figure.key]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right" if figure.key == "up" else "best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="grey")
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def plot(report: Report, figure: Figure, path: Path) -> None:
    fig = figure_for(report, figure)
    fig.savefig(path, dpi=100)
    plots.pyplot().close(fig)


HEADER = ["host", "service", *(f.title for f in FIGURES), "memory growth"]


def rows(report: Report) -> list[list[str]]:
    """A row per service: its figures at the window's end, then its memory's verdict."""
    found = []
    for key in report.services():
        verdict = report.growth.get(key)
        shown = [
            text(latest(report.series[f.key].get(key, []), report.window), f.unit) for f in FIGURES
        ]
        found.append([*key, *shown, verdict.state if verdict else "not judged"])
    return found


def to_json(report: Report) -> dict[str, Any]:
    return {
        "prometheus": report.base,
        "start": report.window.start,
        "end": report.window.end,
        "step": report.window.step,
        "figures": {
            f.key: [{"host": k[0], "service": k[1], "points": report.series[f.key][k]}
                    for k in sorted(report.series[f.key])]
            for f in FIGURES
        },
        "growth": [{"host": k[0], "service": k[1], "state": g.state, "rise_bytes": g.rise,
                    "band_bytes": g.band, "reason": g.reason}
                   for k, g in sorted(report.growth.items())],
    }  # fmt: skip


def write(report: Report, out: Path) -> Path:
    """The PNGs, series.json and index.html into `out`; index.html's path."""
    out.mkdir(parents=True, exist_ok=True)
    pngs = []
    for figure in FIGURES:
        pngs.append(out / f"{figure.key}.png")
        plot(report, figure, pngs[-1])
    (out / "series.json").write_text(json.dumps(to_json(report), indent=1))
    window = report.settings.growth_window
    parts = [
        *plots.head("acceldeploy report"),
        f"<h1>Report: {html.escape(report.window.text())}</h1>",
        f"<p>From Prometheus at {html.escape(report.base)}, a point every "
        f"{report.window.step} s. Figures at the window's end (- where a service had none).</p>",
        plots.table(HEADER, rows(report)),
        f"<h2>Memory growth</h2><p>The growth alert's test, at the window's end: growing when "
        f"the lowest reading of the last {window} is above the highest two windows back by "
        "more than the noise band, with requests served in both.</p><ul>",
        *(f"<li>{html.escape('/'.join(k))}: <b>{g.state}</b>: {html.escape(g.reason)}</li>"
          for k, g in sorted(report.growth.items())),
        "</ul>",
        *(plots.inline_png(path) for path in pngs),
    ]  # fmt: skip
    index = out / "index.html"
    index.write_text("\n".join(parts))
    return index
