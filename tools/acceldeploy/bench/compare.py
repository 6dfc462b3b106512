"""Bench runs side by side: a table and a plot of each run's figures (the median of its rounds,
with their interval) and its fleet's prefix-cache hit rate. What a gateway routing comparison
(docs/benchmarks) is read from.

    python -m acceldeploy.bench.compare LABEL=RUN_DIR [LABEL=RUN_DIR ...] [--png FILE]

RUN_DIR is a bench run's directory (its summary.json); the run's first service is read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from acceldeploy import plots
from acceldeploy.bench.formatting import spread
from acceldeploy.bench.summary import round_intervals

FIGURES = {
    "request_throughput": "req/s",
    "median_ttft_ms": "p50 TTFT ms",
    "p99_ttft_ms": "p99 TTFT ms",
}


def read(run_dir: Path) -> dict[str, Any]:
    """The run's first service: its intervals per figure and its fleet's hit rate."""
    summary = json.loads((run_dir / "summary.json").read_text())
    service = summary["services"][0]
    (point,) = service["points"]
    fleet = service.get("fleet_prefix_cache") or {}
    return {
        "intervals": round_intervals(point["runs"]),
        "hit_rate": fleet.get("hit_rate"),
        "failed": sum(int(r.get("failed") or 0) for r in point["runs"]),
    }


def table(runs: dict[str, dict[str, Any]]) -> list[str]:
    header = ["run", "prefix-cache hit", *FIGURES.values(), "failed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, run in runs.items():
        cells = [label, str(run["hit_rate"])]
        cells += [spread(run["intervals"].get(f)) for f in FIGURES]
        lines.append("| " + " | ".join([*cells, str(run["failed"])]) + " |")
    return lines


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    plt = plots.pyplot()
    fig, axes = plt.subplots(1, 1 + len(FIGURES), figsize=(4 * (1 + len(FIGURES)), 3.6))
    labels = list(runs)
    rates = [runs[label]["hit_rate"] or 0.0 for label in labels]
    axes[0].bar(labels, rates, color="tab:green")
    axes[0].set_title("fleet prefix-cache hit rate")
    axes[0].set_ylim(0, 1)
    for ax, (figure, unit) in zip(axes[1:], FIGURES.items(), strict=True):
        found = [runs[label]["intervals"].get(figure) for label in labels]
        # the median of the rounds, its whisker the interval of their mean
        medians = [f.median if f else 0.0 for f in found]
        errors = [
            [max(0.0, f.median - f.low) if f else 0.0 for f in found],
            [max(0.0, f.high - f.median) if f else 0.0 for f in found],
        ]
        ax.bar(labels, medians, yerr=errors, capsize=4, color="tab:blue")
        ax.set_title(unit)
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acceldeploy.bench.compare")
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN_DIR")
    parser.add_argument("--png", type=Path, help="write the plot here")
    args = parser.parse_args(argv)
    runs = {}
    for spec in args.runs:
        label, sep, where = spec.partition("=")
        if not sep:
            parser.error(f"{spec}: give LABEL=RUN_DIR")
        runs[label] = read(Path(where))
    print("\n".join(table(runs)))
    if args.png:
        plot(runs, args.png)
        print(f"plot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
