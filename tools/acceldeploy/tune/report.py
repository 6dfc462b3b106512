"""What a tune shows people: the table of every point (each figure the median of its runs
with its interval, each gain over the deployed flags with its interval), the decision in one
line, and the Pareto plot with the intervals as error bars."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from acceldeploy import plots, tables
from acceldeploy.bench import formatting
from acceldeploy.bench.interval import METHOD, Interval
from acceldeploy.tune.decision import NO_WINNER

# The decision first: a table split to fit the line keeps these beside each point.
COLUMNS = ("point", "status", "beats deployed", "req/s at SLA", "gain req/s", "p99 TTFT ms",
           "peak MiB", "gain MiB", "ready s", "runs")  # fmt: skip


def _interval(row: dict[str, Any], key: str) -> Interval | None:
    data = row.get(key)
    return None if data is None else Interval.from_dict(data)


def cells(row: dict[str, Any], runs: int) -> list[str]:
    status = row["status"]
    why = row.get("reason") or "; ".join(row.get("why_not") or [])
    if why:
        status += f": {why[:70]}"

    def figure(key: str, number: str = "significant", sign: bool = False) -> str:
        return formatting.spread(_interval(row, key), number, sign)

    beats = "(baseline)" if row["deployed"] else row.get("beats") or "no"
    return [
        row["label"], status, beats,
        figure("sla_throughput"), figure("gain_sla_throughput", sign=True),
        figure("p99_ttft_ms"), figure("peak_mib", number="mib"),
        figure("gain_peak_mib", number="mib", sign=True), figure("ready_seconds"),
        f"{row['runs']}/{runs}",
    ]  # fmt: skip


def legend(runs: int) -> str:
    return (
        f"Each figure: the median of the runs [{METHOD}, {runs} runs a point]. Gains: the "
        "paired differences with the deployed flags' run of the same cycle. A point beats the "
        "deployed flags when its gain's interval lies wholly above 0 (req/s), or wholly below 0 "
        "(MiB) while its req/s gain's interval holds 0."
    )


def decision_line(best: dict[str, Any] | None) -> str:
    if best is None:
        return f"winner: none: {NO_WINNER}"
    gain = _interval(best, "gain_sla_throughput")
    memory = _interval(best, "gain_peak_mib")
    if best["beats"] == "throughput":
        by = f"{formatting.spread(gain, sign=True)} req/s at the SLA"
    else:
        by = f"{formatting.spread(memory, number='mib', sign=True)} MiB peak at equal req/s"
    return f"winner: {best['label']}: beats the deployed flags by {by}"


def print_table(out: Any, rows: list[dict[str, Any]], title: str, runs: int) -> None:
    """The table of every point on the console `out`, split to fit its width."""
    shown = [cells(row, runs) for row in rows]
    tables.print_table(out, title, COLUMNS, shown, caption=legend(runs))


def _errors(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[list[float]]]:
    """Medians and matplotlib's [below, above] error lengths (0 without an interval)."""
    medians, below, above = [], [], []
    for row in rows:
        one = _interval(row, key)
        assert one is not None
        medians.append(one.median)
        below.append(max(0.0, one.median - one.low))
        above.append(max(0.0, one.high - one.median))
    return medians, [below, above]


# How far above the highest point the SLA may sit and still set the TTFT axis (linear, log).
SLA_IN_VIEW = (2.0, 4.0)
# Where a label may go beside its point (points): nearest first, then farther out.
LABEL_OFFSETS = [(dx, dy) for ring in ((6, -14), (20, -28), (34, -42), (48, -56))
                 for dy in ring for dx in (8, -8)]  # fmt: skip
TITLE_WIDTH = 100


def _ttfts(shown: list[dict[str, Any]], missed: list[dict[str, Any]]) -> list[float]:
    """The p99 TTFTs the points span: each interval's ends, each missed point's lowest rate."""
    values = [v for r in shown if (one := _interval(r, "p99_ttft_ms"))
              for v in (one.low, one.high)]  # fmt: skip
    return values + [float(r["lowest"]["p99_ttft_ms"] or 0.0) for r in missed]


def ttft_axis(
    values: list[float], sla_ttft: float | None
) -> tuple[tuple[float, float], bool, bool]:
    """The TTFT axis from the points alone: its limits, whether it is logarithmic (the points
    span more than a factor of ten) and whether the SLA is in view (near enough above the
    points; else the plot notes it instead of shrinking the points onto the floor)."""
    positive = [v for v in values if v > 0] or [1.0]
    top, bottom = max(positive), min(positive)
    logarithmic = top / bottom > 10
    sla_shown = bool(sla_ttft) and float(sla_ttft or 0) <= top * SLA_IN_VIEW[logarithmic]
    if sla_shown:
        top = max(top, float(sla_ttft or 0))
    if logarithmic:
        return (bottom / 1.5, top * 1.5), True, sla_shown
    return (0.0, top * 1.15), False, sla_shown


def _overlaps(box: Any, others: list[Any]) -> bool:
    return any(box.overlaps(other) for other in others)


def place_labels(ax: Any, points: list[tuple[float, float, str]]) -> list[Any]:
    """Each point's label at the first offset (LABEL_OFFSETS) where it overlaps no other label,
    no point, the legend or a note, and stays inside the axes; a thin line leads to its point."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    marks = [ax.transData.transform((x, y)) for x, y, _ in points]
    pad = 7.0  # a marker's half width, in pixels
    taken = [Bbox.from_extents(mx - pad, my - pad, mx + pad, my + pad) for mx, my in marks]
    taken += [a.get_window_extent(renderer) for a in (ax.get_legend(), *ax.texts) if a]
    placed = []
    for x, y, text in sorted(points, key=lambda p: (p[0], p[1])):
        for n, (dx, dy) in enumerate(LABEL_OFFSETS):
            label = ax.annotate(
                text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                ha="left" if dx > 0 else "right", va="center",
                arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5, "shrinkB": 5},
            )  # fmt: skip
            label.update_positions(renderer)
            box = Text.get_window_extent(label, renderer)  # the words, not the leader
            fits = inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
            if (fits and not _overlaps(box, taken)) or n == len(LABEL_OFFSETS) - 1:
                taken.append(box)
                placed.append(label)
                break
            label.remove()
    return placed


def pareto_title(where: str, sla: str, best: dict[str, Any] | None) -> str:
    """What was tuned where, what the search optimises, and its decision."""
    aim = f"tune {where}: the most req/s within {sla or 'the SLA'}, then the least peak memory"
    lines = [*textwrap.wrap(aim, TITLE_WIDTH), *textwrap.wrap(decision_line(best), TITLE_WIDTH)]
    return "\n".join(lines)


def pareto_figure(
    rows: list[dict[str, Any]],
    best: dict[str, Any] | None,
    sla_ttft: float | None,
    where: str = "",
    sla: str = "",
) -> Any:
    """Throughput at the SLA against p99 TTFT, each the median of the runs with its interval as
    error bars, peak memory as colour; the deployed flags a black diamond, the winner ringed;
    a point that missed the SLA at every rate a grey cross at the lowest rate tried. The axes
    fit the points: the SLA's p99 TTFT is a dashed line where it is near them, else a note
    at the top (so it cannot flatten the points onto zero). `where`: host/service; `sla`:
    the SLA as the command took it."""
    plt = plots.pyplot()
    shown = [r for r in rows if r.get("runs") and r.get("p99_ttft_ms")]
    missed = [r for r in rows if r.get("lowest") and not r.get("p99_ttft_ms")]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    labels: list[tuple[float, float, str]] = []
    xs_all: list[float] = []
    if shown:
        xs, xerr = _errors(shown, "sla_throughput")
        ys, yerr = _errors(shown, "p99_ttft_ms")
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor="grey", capsize=3,
                    linewidth=1, zorder=1)  # fmt: skip
        colour = [(_interval(r, "peak_mib") or Interval(1, 0, 0, 0, 0)).median for r in shown]
        points = ax.scatter(xs, ys, c=colour, cmap="viridis", s=80, zorder=2)
        fig.colorbar(points, ax=ax, label="peak memory MiB (median)")
        for row, x, y in zip(shown, xs, ys, strict=True):
            labels.append((x, y, row["label"]))
            if row["deployed"]:
                ax.scatter([x], [y], marker="D", s=140, facecolors="none", edgecolors="black",
                           linewidths=2, label="deployed flags", zorder=3)  # fmt: skip
            if best is not None and row["label"] == best["label"]:
                ax.scatter([x], [y], s=260, facecolors="none", edgecolors="red", linewidths=2,
                           label="winner", zorder=3)  # fmt: skip
        xs_all += [x + e for x, e in zip(xs, xerr[1], strict=True)]
    for row in missed:
        lowest = row["lowest"]
        at = (lowest["throughput"] or 0.0, lowest["p99_ttft_ms"] or 0.0)
        ax.scatter(*at, marker="x", s=80, color="grey", label="missed the SLA (lowest rate)")
        labels.append((at[0], at[1], f"{row['label']} @ {lowest['rate']} req/s"))
        xs_all.append(at[0])
    (bottom, top), logarithmic, sla_shown = ttft_axis(_ttfts(shown, missed), sla_ttft)
    if logarithmic:
        ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    ax.set_xlim(0, max([*xs_all, 0.0]) * 1.3 or 1.0)
    if sla_ttft and sla_shown:
        ax.axhline(sla_ttft, color="grey", linestyle="--", linewidth=1,
                   label=f"SLA p99 TTFT {formatting.significant(sla_ttft)} ms")  # fmt: skip
    elif sla_ttft:
        ax.text(0.99, 0.98, f"SLA p99 TTFT {formatting.significant(sla_ttft)} ms: "
                f"{formatting.significant(sla_ttft / top)}x this plot's top, above it",
                transform=ax.transAxes, ha="right", va="top", fontsize=7, color="grey")  # fmt: skip
    handles, names = ax.get_legend_handles_labels()
    if handles:
        unique = dict(zip(names, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    ax.set_xlabel(f"requests/s at the highest rate meeting the SLA (bars: {METHOD})")
    ax.set_ylabel("p99 TTFT ms" + (" (log scale)" if logarithmic else ""))
    ax.set_title(pareto_title(where, sla, best), fontsize=9)
    fig.tight_layout()
    place_labels(ax, labels)
    return fig


def plot_pareto(
    rows: list[dict[str, Any]],
    best: dict[str, Any] | None,
    sla_ttft: float | None,
    path: Path,
    where: str = "",
    sla: str = "",
) -> None:
    """pareto_figure() into a PNG at `path`."""
    fig = pareto_figure(rows, best, sla_ttft, where, sla)
    fig.savefig(path, dpi=100)
    plots.pyplot().close(fig)
