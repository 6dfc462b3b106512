"""One service's bench run as a summary (schemas/bench-summary.schema.json): vLLM's figures
per rate and round, memory per device and phase, vLLM's metrics per round, the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acceldeploy.bench import interval, series, verdict
from acceldeploy.bench.formatting import mib, percent
from acceldeploy.bench.series import Sample

# vLLM result keys compared across rounds and against baselines (higher or lower is better).
HIGHER = ("request_throughput", "output_throughput", "request_goodput")
LOWER = ("p99_ttft_ms", "p99_tpot_ms", "p99_e2el_ms", "median_ttft_ms", "median_tpot_ms")
FIGURES = HIGHER + LOWER
RUN_KEYS = ("completed", "failed", "duration", *FIGURES)


def point_summaries(run_dir: Path) -> list[dict[str, Any]]:
    points = []
    for path in sorted(run_dir.glob("BENCH-request_rate=*/summary.json")):
        runs = json.loads(path.read_text())
        kept = [{k: r.get(k) for k in RUN_KEYS} for r in runs]
        values = {f: [float(r[f]) for r in runs if r.get(f) is not None] for f in FIGURES}
        points.append(
            {
                "rate": str(runs[0]["request_rate"]) if runs else path.parent.name,
                "runs": kept,
                "median": {f: verdict.median(v) for f, v in values.items() if v},
                "spread": {f: verdict.spread(v) for f, v in values.items() if v},
                "interval": {f: i.to_dict() for f, i in round_intervals(kept).items()},
            }
        )
    return points


def round_intervals(runs: list[dict[str, Any]]) -> dict[str, interval.Interval]:
    """Per figure, its interval across a bench point's rounds (`runs`: vLLM's result per round;
    a baseline written before the interval was kept has them too)."""
    found = {}
    for figure in FIGURES:
        values = [float(r[figure]) for r in runs if r.get(figure) is not None]
        one = interval.of(values)
        if one is not None:
            found[figure] = one
    return found


def _round_phases(phases: list[str]) -> list[tuple[str, str]]:
    return [(p, f"after {p}") for p in phases if p.startswith("round ") and f"after {p}" in phases]


def _counter_over(samples: list[Sample], start: str, end: str, key: str) -> float | None:
    """A counter's rise from just before `start` to the end of `end`."""
    first = next((i for i, s in enumerate(samples) if s.phase == start), None)
    if first is None:
        return None
    before = [s.metrics[key] for s in samples[:first] if key in s.metrics]
    after = [s.metrics[key] for s in samples if s.phase == end and key in s.metrics]
    return after[-1] - before[-1] if before and after else None


def _hit_rate(samples: list[Sample], start: str, end: str, kind: str) -> float | None:
    queries = _counter_over(samples, start, end, f"{kind}_queries")
    hits = _counter_over(samples, start, end, f"{kind}_hits")
    if not queries or hits is None:
        return None if queries is None else 0.0
    return round(hits / queries, 4)


def _rise(samples: list[Sample], key: str) -> float | None:
    """A counter's rise over the whole run."""
    values = [s.metrics[key] for s in samples if key in s.metrics]
    return values[-1] - values[0] if values else None


def metrics_summary(samples: list[Sample], phases: list[str]) -> dict[str, Any]:
    rounds = []
    for start, end in _round_phases(phases):
        rounds.append(
            {
                "phase": start,
                "mm_cache_hit_rate": _hit_rate(samples, start, end, "mm_cache"),
                "prefix_cache_hit_rate": _hit_rate(samples, start, end, "prefix_cache"),
                "preemptions": _counter_over(samples, start, end, "preemptions"),
            }
        )
    return {
        "rounds": rounds,
        "kv_cache_usage_max": series.peak(samples, "kv_cache_usage"),
        "running_max": series.peak(samples, "running"),
        "waiting_max": series.peak(samples, "waiting"),
        "preemptions": _rise(samples, "preemptions"),
        "scraped": any(s.metrics for s in samples),
    }


def memory_summary(samples: list[Sample], phases: list[str]) -> dict[str, Any]:
    devices = {}
    for device in series.devices_of(samples):
        readings = [s.memory_mib[device] for s in samples if device in s.memory_mib]
        devices[device] = {
            "phases": {p: series.phase_memory(samples, p, device) for p in phases},
            "peak": max(readings) if readings else None,
        }
    return devices


def held_by(memory: dict[str, Any], metrics: dict[str, Any], phases: list[str]) -> str:
    """What the plateau is made of, where it can be read."""
    parts = []
    if metrics["kv_cache_usage_max"] is not None:
        parts.append(f"KV cache up to {percent(metrics['kv_cache_usage_max'])} used")
    hits = [r["mm_cache_hit_rate"] for r in metrics["rounds"] if r["mm_cache_hit_rate"]]
    if hits:
        parts.append(f"mm processor cache hit rate up to {percent(max(hits))}")
    after = [p for p in phases if p.startswith("after round ")]
    if "after reset_mm_cache" in phases and after:
        for device, data in memory.items():
            last, reset = data["phases"].get(after[-1]), data["phases"].get("after reset_mm_cache")
            if last is not None and reset is not None:
                parts.append(f"{device}: {mib(reset - last, sign=True)} MiB after /reset_mm_cache")
    return "; ".join(parts)


def service_summary(run_dir: Path, samples: list[Sample], meta: dict[str, Any]) -> dict[str, Any]:
    """`meta`: host, service, platform, key, dev_mode, and via for a load through a gateway
    (from the runner)."""
    phases = series.phases_in_order(samples)
    memory = memory_summary(samples, phases)
    metrics = metrics_summary(samples, phases)
    sla_file = run_dir / "sla.json"
    sla = json.loads(sla_file.read_text()) if sla_file.exists() else None
    after = [p for p in phases if p.startswith("after round ")]
    judged = [verdict.judge(samples, device, meta["platform"], after) for device in memory]
    growing = [v for v in judged if v.state == "growing"]
    state = (
        "growing" if growing
        else "bounded" if judged and all(v.state == "bounded" for v in judged)
        else "not judged"
    )  # fmt: skip
    return {
        **{k: meta[k] for k in ("host", "service", "platform", "key", "dev_mode")},
        **({"via": meta["via"]} if meta.get("via") else {}),
        "points": point_summaries(run_dir),
        "phases": phases,
        "memory": {"unit": "MiB", "devices": memory},
        "metrics": metrics,
        "verdict": {
            "state": state,
            "devices": [v.to_dict() for v in judged],
            "held_by": held_by(memory, metrics, phases),
            "reset_endpoints": "used"
            if meta["dev_mode"]
            else "not used: VLLM_SERVER_DEV_MODE is off for this service",
        },
        "sla": sla,
    }
