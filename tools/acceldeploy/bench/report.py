"""What a bench run leaves for people: CSV series, PNG plots (matplotlib) and one
self-contained HTML report (plots inlined)."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path
from typing import Any

from acceldeploy import plots
from acceldeploy.bench import series
from acceldeploy.bench.formatting import spread
from acceldeploy.bench.interval import METHOD
from acceldeploy.bench.series import Sample
from acceldeploy.bench.summary import round_intervals

TABLE_FIGURES = ("request_throughput", "median_ttft_ms", "p99_ttft_ms", "p99_tpot_ms")
PLOTS = ("memory.png", "metrics.png", "throughput-latency.png")
METRIC_KEYS = ("kv_cache_usage", "running", "waiting", "preemptions",
               "prefix_cache_hits", "mm_cache_hits")  # fmt: skip


def write_csv(samples: list[Sample], out: Path) -> None:
    devices = series.devices_of(samples)
    start = samples[0].t if samples else 0.0
    with (out / "memory.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seconds", "phase", *(f"{d} MiB" for d in devices)])
        for s in samples:
            readings = [f"{s.memory_mib[d]:.1f}" if d in s.memory_mib else "" for d in devices]
            writer.writerow([f"{s.t - start:.2f}", s.phase, *readings])
    with (out / "metrics.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seconds", "phase", *METRIC_KEYS])
        for s in samples:
            writer.writerow(
                [f"{s.t - start:.2f}", s.phase, *(s.metrics.get(k, "") for k in METRIC_KEYS)]
            )


def _shade_phases(ax: Any, samples: list[Sample], start: float) -> None:
    """Rounds shaded, every other phase boundary a dotted line with its name."""
    spans: list[tuple[str, float, float]] = []
    for s in samples:
        if spans and spans[-1][0] == s.phase:
            spans[-1] = (s.phase, spans[-1][1], s.t - start)
        else:
            spans.append((s.phase, s.t - start, s.t - start))
    for phase, left, right in spans:
        if phase.startswith("round "):
            ax.axvspan(left, right, color="tab:orange", alpha=0.15)
            ax.text(left, 1.0, phase.split(" @")[0], transform=ax.get_xaxis_transform(),
                    fontsize=7, va="bottom")  # fmt: skip
        elif not phase.startswith("after round"):
            ax.axvline(left, color="grey", linestyle=":", linewidth=0.8)
            ax.text(left, 0.02, phase, rotation=90, transform=ax.get_xaxis_transform(),
                    fontsize=7, va="bottom", color="grey")  # fmt: skip


def plot_memory(samples: list[Sample], title: str, path: Path) -> None:
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    start = samples[0].t if samples else 0.0
    for device in series.devices_of(samples):
        xs = [s.t - start for s in samples if device in s.memory_mib]
        ax.plot(xs, [s.memory_mib[device] for s in samples if device in s.memory_mib], label=device)
    _shade_phases(ax, samples, start)
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_metrics(samples: list[Sample], title: str, path: Path) -> None:
    plt = plots.pyplot()
    fig, (kv, queue) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    start = samples[0].t if samples else 0.0
    with_metrics = [s for s in samples if s.metrics]
    xs = [s.t - start for s in with_metrics]
    kv.plot(xs, [100 * s.metrics.get("kv_cache_usage", 0.0) for s in with_metrics],
            color="tab:purple")  # fmt: skip
    kv.set_ylabel("KV cache used %")
    for key, colour in (("running", "tab:green"), ("waiting", "tab:red")):
        queue.plot(xs, [s.metrics.get(key, 0.0) for s in with_metrics], label=key, color=colour)
    queue.set_ylabel("requests")
    queue.set_xlabel("seconds")
    queue.legend(fontsize=8)
    for ax in (kv, queue):
        _shade_phases(ax, samples, start)
    kv.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def point_rows(points: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(label, figures) per bar: each round of a single rate, else each rate's medians."""
    if len(points) == 1:
        (point,) = points
        return [(f"{point['rate']} r{i + 1}", run) for i, run in enumerate(point["runs"])]
    return [(str(p["rate"]), p["median"]) for p in points]


def plot_points(points: list[dict[str, Any]], title: str, path: Path) -> None:
    """Throughput and latency percentiles per rate (per round when there is one rate)."""
    plt = plots.pyplot()
    fig, (tput, lat) = plt.subplots(1, 2, figsize=(10, 4))
    rows = point_rows(points)
    labels = [label for label, _ in rows]
    tput.bar(labels, [row.get("request_throughput") or 0.0 for _, row in rows], color="tab:blue")
    tput.set_ylabel("requests/s")
    tput.set_title("throughput", fontsize=10)
    for key in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms"):
        lat.plot(labels, [row.get(key) or 0.0 for _, row in rows], marker="o", label=key)
    lat.set_ylabel("ms")
    lat.set_title("latency", fontsize=10)
    lat.legend(fontsize=8)
    for ax in (tput, lat):
        ax.tick_params(axis="x", labelsize=8, rotation=30)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render_service(samples: list[Sample], summary: dict[str, Any], out: Path) -> list[Path]:
    title = f"{summary['host']} / {summary['service']}"
    write_csv(samples, out)
    pngs = [out / name for name in PLOTS]
    plot_memory(samples, f"{title}: memory ({summary['verdict']['state']})", pngs[0])
    plot_metrics(samples, f"{title}: vLLM metrics", pngs[1])
    plot_points(summary["points"], title, pngs[2])
    return pngs


def figures_line(service: dict[str, Any]) -> str | None:
    """`lab1/qwen3-vl: 4.02 [3.91, 4.13] req/s, p99 TTFT ...`: a single-rate run's figures
    across its rounds (None for a rate sweep: its rates are in sla.json and the plots)."""
    if len(service["points"]) != 1:
        return None
    found = round_intervals(service["points"][0]["runs"])
    units = {"request_throughput": "req/s", "median_ttft_ms": "ms p50 TTFT",
             "p99_ttft_ms": "ms p99 TTFT", "p99_tpot_ms": "ms p99 TPOT"}  # fmt: skip
    figures = ", ".join(f"{spread(found.get(f))} {units[f]}" for f in TABLE_FIGURES)
    return f"{service['host']}/{service['service']}: {figures}{cache_words(service)}"


def cache_words(service: dict[str, Any]) -> str:
    """`; prefix cache hit 0.81 (lab1 0.80, lab2 0.82)`: over the run, on every server."""
    fleet = service.get("fleet_prefix_cache")
    if not fleet or not fleet["hosts"]:
        return ""
    hosts = ", ".join(
        f"{host} {'unread or restarted' if v is None else v['hit_rate']}"
        for host, v in fleet["hosts"].items()
    )
    rate = "unknown" if fleet["hit_rate"] is None else fleet["hit_rate"]
    return f"; prefix cache hit {rate} ({hosts})"


def write_html(run: dict[str, Any], run_dir: Path) -> Path:
    parts = [
        *plots.head("acceldeploy bench"),
        f"<h1>Bench {html.escape(run['run'])}: profile {html.escape(run['profile']['name'])}</h1>",
        f"<p>Figures: the median of the rounds [{METHOD}].</p>",
        "<table><tr><th>host</th><th>service</th><th>verdict</th><th>req/s</th>"
        "<th>p50 TTFT ms</th><th>p99 TTFT ms</th><th>p99 TPOT ms</th></tr>",
    ]
    for s in run["services"]:
        found = round_intervals(s["points"][0]["runs"]) if s["points"] else {}
        parts.append(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
                s["host"], s["service"], s["verdict"]["state"],
                *(spread(found.get(f)) for f in TABLE_FIGURES))) + "</tr>"
        )  # fmt: skip
    parts.append("</table>")
    if run.get("comparisons"):
        lines = "\n".join(c["text"] for c in run["comparisons"])
        parts.append(f"<h2>against the baseline</h2><pre>{html.escape(lines)}</pre>")
    if run.get("outliers"):
        parts.append(
            f"<h2>outliers</h2><pre>{html.escape(json.dumps(run['outliers'], indent=1))}</pre>"
        )
    for s in run["services"]:
        where = run_dir / s["host"] / s["service"]
        parts.append(f"<h2>{html.escape(s['host'])} / {html.escape(s['service'])}</h2>")
        parts.append(
            f"<p>{html.escape(' '.join(d['reason'] for d in s['verdict']['devices']))}</p>"
        )
        parts.append(f"<p>{html.escape(s['verdict']['held_by'])}</p>")
        pngs = [where / name for name in PLOTS]
        parts += [plots.inline_png(path) for path in pngs if path.exists()]
    path = run_dir / "report.html"
    path.write_text("\n".join(parts))
    return path
