"""From runs to a decision. Each point's figures over its runs (median and the interval of
bench/interval.py), its gain over the deployed flags from the pairs of runs of the same
cycle, and a winner only where that gain clears the noise: throughput up (the gain's interval
wholly above 0), or peak memory down (wholly below 0) with a throughput gain whose interval
holds 0."""

from __future__ import annotations

from typing import Any

from acceldeploy.bench import interval

NO_WINNER = "no point beats the deployed flags beyond the noise"
# The figures of a run summarised over a point's runs.
FIGURES = ("sla_throughput", "p99_ttft_ms", "peak_mib", "ready_seconds")
GAINS = ("sla_throughput", "peak_mib")


def sla_throughput(run: dict[str, Any]) -> float | None:
    """Requests/s at the highest rate that met the SLA; 0 when no rate tried met it (the
    deployed flags can miss the SLA too, and are still what the points are compared with)."""
    if run.get("status") != "measured":
        return None
    return float(run["throughput"] or 0.0) if run.get("best_rate") is not None else 0.0


def _value(run: dict[str, Any], figure: str) -> float | None:
    value = sla_throughput(run) if figure == "sla_throughput" else run.get(figure)
    return None if value is None else float(value)


def _summary(values: list[float | None]) -> dict[str, Any] | None:
    found = interval.of([v for v in values if v is not None])
    return None if found is None else found.to_dict()


def point_row(
    point: dict[str, Any], runs: list[dict[str, Any]], deployed_runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """`point`: label, point, deployed; `runs`: its run records (cycle, status, figures,
    passes, why_not); `deployed_runs`: the deployed flags' (for the pairs)."""
    measured = [r for r in runs if r["status"] == "measured"]
    row: dict[str, Any] = {**point, "runs": len(measured),
                           "best_rates": [r.get("best_rate") for r in measured]}  # fmt: skip
    for figure in FIGURES:
        row[figure] = _summary([_value(r, figure) for r in measured])
    by_cycle = {r["cycle"]: r for r in deployed_runs if r["status"] == "measured"}
    for figure in GAINS:
        pairs = [(r, by_cycle.get(r["cycle"])) for r in measured]
        gain = interval.paired_gain(
            [_value(r, figure) for r, _ in pairs],
            [_value(d, figure) if d else None for _, d in pairs],
        )
        row[f"gain_{figure}"] = None if point["deployed"] or gain is None else gain.to_dict()
    row["lowest"] = next((r["lowest"] for r in measured if r.get("lowest")), None)
    row["why_not"] = [f"run {r['cycle']}: {why}" for r in runs for why in _why_not(r)]
    row["passes"] = bool(measured) and not row["why_not"]
    row["beats"] = None if point["deployed"] else beats(row)
    return row


def _why_not(run: dict[str, Any]) -> list[str]:
    if run["status"] != "measured":
        return [run["status"] + (f": {run['reason']}" if run.get("reason") else "")]
    return list(run.get("why_not") or [])


def _interval(row: dict[str, Any], key: str) -> interval.Interval | None:
    data = row.get(key)
    return None if data is None else interval.Interval.from_dict(data)


def beats(row: dict[str, Any]) -> str | None:
    """'throughput' or 'memory' when the point beats the deployed flags beyond the noise."""
    if not row["passes"]:
        return None
    throughput, memory = _interval(row, "gain_sla_throughput"), _interval(row, "gain_peak_mib")
    if throughput is None or not throughput.known:
        return None
    if throughput.above(0.0):
        return "throughput"
    if not throughput.below(0.0) and memory is not None and memory.below(0.0):
        return "memory"
    return None


def winner(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Of the points that beat the deployed flags: the largest throughput gain (ties to less
    peak memory); without one, the largest memory saving."""
    faster = [r for r in rows if r.get("beats") == "throughput"]
    if faster:
        return max(faster, key=lambda r: (r["gain_sla_throughput"]["mean"],
                                          -(r["peak_mib"] or {}).get("median", 0.0)))  # fmt: skip
    smaller = [r for r in rows if r.get("beats") == "memory"]
    return min(smaller, key=lambda r: r["gain_peak_mib"]["mean"], default=None)


def rows(
    points: list[dict[str, Any]], runs: list[dict[str, Any]], skipped: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per point (the deployed flags first): `skipped` points (does not fit, pruned)
    carry their status and reason; the others their figures over the runs done."""
    deployed = [r for r in runs if r.get("deployed")]
    found = []
    for point in points:
        if point["label"] in skipped:
            found.append({**point, **skipped[point["label"]], "runs": 0, "passes": False,
                          "beats": None})  # fmt: skip
            continue
        mine = [r for r in runs if r["label"] == point["label"]]
        status = "measured" if any(r["status"] == "measured" for r in mine) else (
            mine[-1]["status"] if mine else "not run")  # fmt: skip
        found.append({**point_row(point, mine, deployed), "status": status})
    return found
