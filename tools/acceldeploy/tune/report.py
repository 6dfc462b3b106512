"""What a tune shows people: the table of every point (each figure the median of its runs
with its interval, each gain over the deployed flags with its interval), the decision in one
line, and the Pareto plot with the intervals as error bars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acceldeploy import tables
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


# Where each point's label goes (points), taking turns from left to right: neighbours' labels
# sit at different heights.
LABEL_OFFSETS = ((6, 6), (6, -13), (6, 19), (6, -26))


def _plotted_ttfts(
    shown: list[dict[str, Any]], rows: list[dict[str, Any]], sla_ttft: float | None
) -> list[float]:
    """Every p99 TTFT the plot draws: the points, the missed points' lowest rate, the SLA."""
    values = [one.median for r in shown if (one := _interval(r, "p99_ttft_ms")) is not None]
    values += [float((r.get("lowest") or {}).get("p99_ttft_ms") or 0.0)
               for r in rows if r.get("lowest") and not r.get("p99_ttft_ms")]  # fmt: skip
    return values + ([float(sla_ttft)] if sla_ttft else [])


def plot_pareto(
    rows: list[dict[str, Any]],
    best: dict[str, Any] | None,
    sla_ttft: float | None,
    path: Path,
    title: str = "",
) -> None:
    """Throughput at the SLA against p99 TTFT, each the median of the runs with its interval as
    error bars, peak memory as colour; the deployed flags a black diamond, the winner ringed;
    a point that missed the SLA at every rate is a grey cross at the lowest rate tried; the
    SLA's p99 TTFT as a dashed line. When the values span more than a factor of ten (the SLA
    far above the points, a missed point far out) the TTFT axis is logarithmic, so no line
    flattens the points onto zero. `title`: the host, service and decision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.get("runs") and r.get("p99_ttft_ms")]
    fig, ax = plt.subplots(figsize=(8, 5))
    if shown:
        xs, xerr = _errors(shown, "sla_throughput")
        ys, yerr = _errors(shown, "p99_ttft_ms")
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor="grey", capsize=3,
                    linewidth=1, zorder=1)  # fmt: skip
        colour = [(_interval(r, "peak_mib") or Interval(1, 0, 0, 0, 0)).median for r in shown]
        points = ax.scatter(xs, ys, c=colour, cmap="viridis", s=80, zorder=2)
        fig.colorbar(points, ax=ax, label="peak memory MiB (median)")
        placed = sorted(zip(xs, ys, shown, strict=True), key=lambda p: (p[0], p[1]))
        for turn, (x, y, row) in enumerate(placed):
            dx, dy = LABEL_OFFSETS[turn % len(LABEL_OFFSETS)]
            ax.annotate(row["label"], (x, y), fontsize=7, xytext=(dx, dy),
                        textcoords="offset points")  # fmt: skip
        for row, x, y in zip(shown, xs, ys, strict=True):
            if row["deployed"]:
                ax.scatter([x], [y], marker="D", s=140, facecolors="none", edgecolors="black",
                           linewidths=2, label="deployed flags", zorder=3)  # fmt: skip
            if best is not None and row["label"] == best["label"]:
                ax.scatter([x], [y], s=260, facecolors="none", edgecolors="red", linewidths=2,
                           label="winner", zorder=3)  # fmt: skip
    for row in rows:
        lowest = row.get("lowest")
        if lowest and not row.get("p99_ttft_ms"):
            at = (lowest["throughput"] or 0.0, lowest["p99_ttft_ms"] or 0.0)
            ax.scatter(*at, marker="x", s=80, color="grey", label="missed the SLA (lowest rate)")
            ax.annotate(f"{row['label']} @ {lowest['rate']} req/s", at, fontsize=7,
                        xytext=(4, 4), textcoords="offset points")  # fmt: skip
    if sla_ttft:
        ax.axhline(sla_ttft, color="grey", linestyle="--", linewidth=1,
                   label=f"SLA p99 TTFT {formatting.significant(sla_ttft)} ms")  # fmt: skip
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=8)
    ax.margins(x=0.3, y=0.1)  # room for the labels
    ax.set_xlabel(f"requests/s at the highest rate meeting the SLA (bars: {METHOD})")
    plotted = [y for y in _plotted_ttfts(shown, rows, sla_ttft) if y > 0]
    logarithmic = bool(plotted) and max(plotted) / min(plotted) > 10
    if logarithmic:
        ax.set_yscale("log")
    ax.set_ylabel("p99 TTFT ms" + (" (log scale)" if logarithmic else ""))
    winner = "winner: none" if best is None else f"winner: {best['label']}"
    ax.set_title(f"{title}\n{winner}" if title else winner, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
