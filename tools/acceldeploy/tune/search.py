"""Seed 002's loop on one service: for each point of the grid, the planner first (points that
cannot start are reported, not tried), then the point's flags as a runtime drop-in, restart,
the bench profile with the SLA rate search and identical rounds at the rate found, memory and
vLLM's metrics throughout; judged against the SLA, a memory headroom, preemptions and the
leak verdict. Every point, the deployed flags first, is measured --runs times in the order of
tune/schedule.py, and tune/decision.py turns the runs into figures with intervals and a
decision. The service is put back on its deployed flags at the end, on failure and on Ctrl-C;
the state file lets `--resume` skip finished runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceldeploy.bench import baseline
from acceldeploy.bench.formatting import significant
from acceldeploy.tune import decision, estimate, schedule
from acceldeploy.tune.estimate import STATE
from acceldeploy.tune.space import label

DEPLOYED = "deployed flags"


@dataclass
class Candidate:
    """A grid point and, when the planner accepts it, what it would deploy."""

    point: dict[str, Any]
    unit: Any = None
    launch: Any = None
    hostvars: dict[str, Any] = field(default_factory=dict)
    plan: Any = None
    reason: str = ""
    deployed: bool = False  # the service as deployed (point 0): no drop-in

    @property
    def label(self) -> str:
        return DEPLOYED if self.deployed else label(self.point)

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "point": self.point, "deployed": self.deployed}


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


@dataclass
class Budget:
    runs: int  # per point
    max_minutes: float
    prior: list[float] = field(default_factory=list)  # run seconds of an earlier tune
    prior_from: Path | None = None


def search(
    candidates: list[Candidate],
    state: dict[str, Any],
    out: Path,
    measure: Callable[[Candidate, int], dict[str, Any]],
    budget: Budget,
    say: Callable[[str], None],
) -> None:
    """Fills state["runs"] (one record per run, in the order measured), state["skipped"]
    (points not run: refused by the planner, pruned) and state["points"] (decision's rows),
    saving after each run. candidates[0] is the deployed flags."""
    skipped: dict[str, dict[str, Any]] = state.setdefault("skipped", {})
    runs: list[dict[str, Any]] = state.setdefault("runs", [])
    state.pop("stopped", None)
    for c in candidates:
        if c.reason:
            skipped[c.label] = {"status": "does not fit", "reason": c.reason}
    by_label = {c.label: c for c in candidates}
    plan = schedule.order([c.label for c in candidates if c.label not in skipped], budget.runs)
    last_axis = list(candidates[-1].point)[-1] if candidates[-1].point else ""
    done = {(r["label"], r["cycle"]) for r in runs}
    for label_, cycle in sorted(done, key=lambda d: d[1]):
        say(f"{label_}: run {cycle} measured (from the earlier run)")
    say(plan_text(candidates, skipped, budget, runs))
    started, timed = time.monotonic(), [float(r["seconds"]) for r in runs if "seconds" in r]

    def live(entry: tuple[str, int]) -> bool:
        """Whether a run of the plan is still to measure."""
        name, cycle = entry
        return (name, cycle) not in done and name not in skipped and not out_of_it(name, runs)

    for i, (name, cycle) in enumerate(plan):
        candidate = by_label[name]
        if not live((name, cycle)):
            continue
        grid_runs = [r for r in runs if not r.get("deployed")]
        pruned = None if candidate.deployed or any(r["label"] == name for r in runs) else (
            pruned_by(candidate, grid_runs, last_axis))  # fmt: skip
        if pruned:
            skipped[name] = {"status": "pruned", "reason": pruned}
            say(f"{name}: pruned: {pruned}")
            refresh(candidates, state, out)
            continue
        per_run = estimate.per_run(timed or budget.prior)
        if not estimate.fits(time.monotonic() - started, per_run, budget.max_minutes):
            limit = f"--max-minutes {budget.max_minutes:g}"
            state["stopped"] = f"over {limit} before {name} run {cycle}"
            say(f"stopped: {state['stopped']}")
            break
        flags = "on the deployed flags" if candidate.deployed else "with these flags"
        say(f"{name}: run {cycle}/{budget.runs}: restart {flags}, then bench")
        begun = time.monotonic()
        record = {**measure(candidate, cycle), **candidate.describe(), "cycle": cycle}
        record["seconds"] = round(time.monotonic() - begun, 1)
        runs.append(record)
        done.add((name, cycle))
        timed.append(record["seconds"])
        refresh(candidates, state, out)
        left = [e for e in plan[i + 1 :] if live(e)]
        say(progress(record, plan, left, state, budget, estimate.per_run(timed)))
    refresh(candidates, state, out)


def out_of_it(name: str, runs: list[dict[str, Any]]) -> bool:
    """A point (not the deployed flags) out of the running: a run of it did not pass."""
    return any(r["label"] == name and not r.get("deployed") and not (
        r["status"] == "measured" and r.get("passes")) for r in runs)  # fmt: skip


def refresh(candidates: list[Candidate], state: dict[str, Any], out: Path) -> None:
    points = [c.describe() for c in candidates]
    state["points"] = decision.rows(points, state["runs"], state["skipped"])
    save_state(out, state)


def plan_text(
    candidates: list[Candidate],
    skipped: dict[str, Any],
    budget: Budget,
    runs: list[dict[str, Any]],
) -> str:
    """What the search will do and how long it should take, said before it starts."""
    labels = [c.label for c in candidates if c.label not in skipped]
    total = len(labels) * budget.runs
    order = schedule.describe(labels, budget.runs)
    lines = [f"plan: {len(labels)} points (the deployed flags first) x {budget.runs} runs = "
             f"{total} runs, interleaved ({order})"]  # fmt: skip
    timed = [float(r["seconds"]) for r in runs if "seconds" in r]
    per_run = estimate.per_run(timed or budget.prior)
    if per_run is None:
        lines.append("estimate: after the first run (no earlier tune of this service and profile)")
        return "\n".join(lines)
    left = total - len(runs)
    source = "the runs so far" if timed else f"the runs of {budget.prior_from}"
    lines.append(f"estimate: {estimate.duration(per_run * left)} ({left} runs at "
                 f"~{estimate.duration(per_run)}, from {source})")  # fmt: skip
    if per_run * left > 60 * budget.max_minutes:
        lines[-1] += (
            f"; over --max-minutes {budget.max_minutes:g}: the search stops there, and a point "
            "with fewer than 2 runs has no interval and cannot win"
        )
    return "\n".join(lines)


def progress(
    record: dict[str, Any],
    plan: list[tuple[str, int]],
    left: list[tuple[str, int]],
    state: dict[str, Any],
    budget: Budget,
    per_run: float | None,
) -> str:
    """'[4/9 runs, 1/3 points done, ~6 min left] a: run 2/3: measured (12.3 req/s ...)'."""
    waiting = {name for name, _ in left}
    points = {name for name, _ in plan}
    ran = len(state["runs"])
    time_left = "?" if per_run is None else estimate.duration(per_run * len(left))
    what = record["status"]
    if record["status"] == "measured":
        rate = significant(decision.sla_throughput(record))
        what += f" ({rate} req/s at the SLA)" if record.get("best_rate") is not None else ""
        what += "" if record.get("passes") else f": {'; '.join(record['why_not'])}"
    elif record.get("reason"):
        what += f": {record['reason']}"
    counts = f"{ran}/{ran + len(left)} runs, {len(points - waiting)}/{len(points)} points done"
    run = f"run {record['cycle']}/{budget.runs}"
    return f"[{counts}, ~{time_left} left] {record['label']}: {run}: {what}"
