"""How long a tune takes: a run (restart on the point's flags, then the profile's bench with its
SLA rate search) costs about what the runs before it cost; before any, what the runs of an
earlier tune of the same service with the same profile cost."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

STATE = "tune.json"


def per_run(seconds: list[float]) -> float | None:
    return statistics.fmean(seconds) if seconds else None


def fits(elapsed: float, run_seconds: float | None, max_minutes: float) -> bool:
    """Whether one more run ends within --max-minutes (before any run: whether time is left)."""
    return elapsed + (run_seconds or 0.0) <= 60 * max_minutes


def earlier(root: Path, settings: dict[str, Any]) -> tuple[list[float], Path | None]:
    """The run times of the most recent earlier tune under `root` of the same host, service and
    profile (and that tune's directory)."""
    same = ("host", "service", "profile")
    for path in sorted(root.glob(f"*/{STATE}"), reverse=True):
        try:
            state = json.loads(path.read_text())
            seconds = [float(r["seconds"]) for r in state.get("runs", []) if "seconds" in r]
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if seconds and all(state["settings"].get(k) == settings[k] for k in same):
            return seconds, path.parent
    return [], None


def duration(seconds: float) -> str:
    """'45 s', '14 min', '2 h 05 min'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
