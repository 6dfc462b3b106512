"""Seed 002's loop on one service: for each point of the grid, the planner first (points that
cannot start are reported, not tried), then the point's flags as a runtime drop-in, restart,
the bench profile with the SLA rate search and identical rounds at the rate found, memory and
vLLM's metrics throughout; judged against the SLA, a memory headroom, preemptions and the
leak verdict. The service is put back on its deployed flags at the end, on failure and on
Ctrl-C; the state file lets `--resume` skip finished points."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceldeploy.bench import baseline
from acceldeploy.tune.space import label

STATE = "tune.json"
DONE = ("measured", "does not fit", "failed to start", "pruned")


@dataclass
class Candidate:
    """A grid point and, when the planner accepts it, what it would deploy."""

    point: dict[str, Any]
    unit: Any = None
    launch: Any = None
    hostvars: dict[str, Any] = field(default_factory=dict)
    plan: Any = None
    reason: str = ""

    @property
    def label(self) -> str:
        return label(self.point)


def rate_label(rate: Any) -> str:
    return "inf" if rate == "inf" else f"{float(rate):g}"


def lowest_rate(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The bench point (rate, median figures) at the lowest rate tried."""
    tried = [p for p in summary["points"] if p["rate"] != "inf"] or summary["points"]
    return min(tried, key=lambda p: float(p["rate"]) if p["rate"] != "inf" else float("inf"),
               default=None)  # fmt: skip


def missed_by(summary: dict[str, Any], lowest: dict[str, Any] | None) -> str:
    """' (at 1 req/s: p99_ttft 6210 ms > 1500)': the SLA figures at the lowest rate tried."""
    limits = (summary["sla"] or {}).get("limits_ms") or {}
    if not lowest or not limits:
        return ""
    median = lowest["median"]
    over = [
        f"{key} {median[f'{key}_ms']:.0f} ms > {limit:g}"
        for key, limit in limits.items()
        if (median.get(f"{key}_ms") or 0.0) > limit
    ]
    rate = "unlimited rate" if lowest["rate"] == "inf" else f"{lowest['rate']} req/s"
    return f" (at {rate}: {', '.join(over)})" if over else ""


def evaluate(
    summary: dict[str, Any], headroom_mib: float, total_mib: float | None
) -> dict[str, Any]:
    """One measured point's row: its figures at the best SLA rate, memory, and whether it
    passes (SLA met, peak within the headroom, no preemptions, memory bounded)."""
    sla = summary["sla"] or {}
    best = sla.get("best_rate")
    at_best = next(
        (p for p in summary["points"] if best is not None and p["rate"] == rate_label(best)), None
    )
    median = at_best["median"] if at_best else {}
    devices = summary["memory"]["devices"]
    peak = max((d["peak"] for d in devices.values() if d["peak"] is not None), default=None)
    ready = [d["phases"].get("ready") for d in devices.values()]
    kept = baseline.kept_memory(summary)
    row = {
        "best_rate": best,
        "throughput": median.get("request_throughput"),
        "output_throughput": median.get("output_throughput"),
        "p99_ttft_ms": median.get("p99_ttft_ms"),
        "p99_tpot_ms": median.get("p99_tpot_ms"),
        "memory_ready_mib": max((r for r in ready if r is not None), default=None),
        "peak_mib": peak,
        "kept_mib": max(kept.values(), default=None),
        "preemptions": summary["metrics"].get("preemptions", 0.0) or 0.0,
        "verdict": summary["verdict"]["state"],
    }
    why_not = []
    if best is None:
        lowest = lowest_rate(summary)
        why_not.append(f"missed the SLA at every rate tried{missed_by(summary, lowest)}")
        if lowest:  # where the plot shows a point that missed
            row["lowest"] = {"rate": lowest["rate"],
                             "throughput": lowest["median"].get("request_throughput"),
                             "p99_ttft_ms": lowest["median"].get("p99_ttft_ms")}  # fmt: skip
    if total_mib is not None and peak is not None and peak > total_mib - headroom_mib:
        why_not.append(
            f"peak {peak:.0f} MiB leaves less than {headroom_mib:.0f} MiB of {total_mib:.0f}"
        )
    if row["preemptions"]:
        why_not.append(f"{row['preemptions']:.0f} preemptions")
    if row["verdict"] != "bounded" and best is not None:  # judged at the rate found only
        why_not.append(f"memory {row['verdict']}")
    return {**row, "passes": not why_not, "why_not": why_not}


def winner(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The highest SLA-meeting throughput among passing points; ties to less memory."""
    passing = [r for r in rows if r.get("passes")]
    if not passing:
        return None
    return min(passing, key=lambda r: (-(r["throughput"] or 0.0), r["peak_mib"] or 0.0))


def pruned_by(candidate: Candidate, rows: list[dict[str, Any]], last_axis: str) -> str | None:
    """Stop the innermost axis once a point missed the SLA at its lowest rate: a later value
    of that axis, the other axes equal, is not tried."""
    for row in rows:
        if row.get("status") != "measured" or row.get("best_rate") is not None:
            continue
        earlier = row["point"]
        same_rest = all(earlier[k] == v for k, v in candidate.point.items() if k != last_axis)
        if same_rest and earlier[last_axis] != candidate.point[last_axis]:
            return f"{label(earlier)} missed the SLA at its lowest rate"
    return None


def load_state(out: Path) -> dict[str, Any] | None:
    path = out / STATE
    return json.loads(path.read_text()) if path.exists() else None


def save_state(out: Path, state: dict[str, Any]) -> None:
    tmp = out / f".{STATE}.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(out / STATE)


def search(
    candidates: list[Candidate],
    state: dict[str, Any],
    out: Path,
    measure: Callable[[Candidate], dict[str, Any]],
    max_minutes: float,
    say: Callable[[str], None],
) -> None:
    """Fills state["points"] (one row per candidate, in grid order), saving after each."""
    rows: dict[str, dict[str, Any]] = {r["label"]: r for r in state["points"]}
    last_axis = list(candidates[0].point)[-1]
    started = time.monotonic()
    for candidate in candidates:
        done = rows.get(candidate.label)
        if done and done["status"] in DONE:
            say(f"{candidate.label}: {done['status']} (from the earlier run)")
            continue
        row: dict[str, Any] = {"label": candidate.label, "point": candidate.point}
        reason = candidate.reason or pruned_by(candidate, list(rows.values()), last_axis)
        if candidate.reason:
            row.update(status="does not fit", reason=candidate.reason)
        elif reason:
            row.update(status="pruned", reason=reason)
        elif (time.monotonic() - started) / 60 > max_minutes:
            row.update(status="not run", reason=f"over --max-minutes {max_minutes:g}")
        else:
            say(f"{candidate.label}: restart with these flags, then bench")
            row.update(measure(candidate))
        say(
            f"{candidate.label}: {row['status']}{': ' + row['reason'] if row.get('reason') else ''}"
        )
        rows[candidate.label] = row
        state["points"] = [rows[c.label] for c in candidates if c.label in rows]
        save_state(out, state)
