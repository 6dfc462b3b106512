"""A run against its baseline: like with like (the key must match), and each figure
regressed, improved or within noise: a change beyond the tolerance whose intervals across
the two runs' rounds (bench/interval.py) lie apart."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from acceldeploy.bench import interval
from acceldeploy.bench.formatting import significant, spread
from acceldeploy.bench.summary import FIGURES, HIGHER, round_intervals
from acceldeploy.errors import AcceldeployError

DEFAULT_TOLERANCE = 0.10  # share of the baseline's figure
KEPT_MEMORY_FLOOR_MIB = 64.0
# A host whose throughput is this share below the fleet median (same service and key).
OUTLIER_SHARE = 0.25
# A figure's state against its baseline, by the side its change is on (better +1, worse -1).
STATES = {1: "improved", -1: "regressed", 0: "within noise"}


def load(directory: Path) -> dict[str, Any]:
    path = directory / "summary.json"
    if not path.is_file():
        raise AcceldeployError(
            f"--baseline {directory}: no summary.json (a tools/bench.py run dir)"
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def argv_flags(argv: list[str]) -> dict[str, str]:
    """`--flag value` pairs (a flag without a value maps to "")."""
    flags: dict[str, str] = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            following = argv[i + 1] if i + 1 < len(argv) else ""
            flags[token] = "" if following.startswith("--") else following
    return flags


def argv_difference(now: list[str], then: list[str]) -> str:
    a, b = argv_flags(then), argv_flags(now)
    parts = [
        f"{flag} {a.get(flag, '(unset)')} -> {b.get(flag, '(unset)')}".replace("  ", " ")
        for flag in sorted(set(a) | set(b))
        if a.get(flag) != b.get(flag)
    ]
    return "argv: " + (", ".join(parts) or f"{then} -> {now}")


def key_difference(now: dict[str, Any], then: dict[str, Any]) -> list[str]:
    """What differs between two runs' keys, argv flag by flag."""
    found = []
    for field in sorted(set(now) | set(then)):
        if now.get(field) == then.get(field):
            continue
        if field == "argv":
            found.append(argv_difference(now.get(field) or [], then.get(field) or []))
        elif field == "env":
            gone = sorted(set(then.get(field) or []) - set(now.get(field) or []))
            added = sorted(set(now.get(field) or []) - set(then.get(field) or []))
            found.append(f"env: -{gone} +{added}")
        elif not (field == "argv_sha256" and now.get("argv") != then.get("argv")):
            found.append(f"{field}: {then.get(field)!r} -> {now.get(field)!r}")
    return found


def _index(run: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(s["host"], s["service"]): s for s in run["services"]}


def _point(service: dict[str, Any]) -> dict[str, Any] | None:
    points = service.get("points") or []
    return points[0] if len(points) == 1 else None


def kept_memory(service: dict[str, Any]) -> dict[str, float]:
    """Per device: memory after the last round minus at ready."""
    kept = {}
    for device, data in service["memory"]["devices"].items():
        phases = data["phases"]
        after = [p for p in phases if p.startswith("after round ")]
        if after and phases.get("ready") is not None and phases.get(after[-1]) is not None:
            kept[device] = phases[after[-1]] - phases["ready"]
    return kept


def check_keys(then: dict[str, Any], keys: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Before any request: every service the baseline also holds has the same key."""
    before = _index(then)
    for where, key in keys.items():
        old = before.get(where)
        diff = [] if old is None else key_difference(key, old["key"])
        if diff:
            raise AcceldeployError(
                f"baseline of {where[0]}/{where[1]} is another setup ({'; '.join(diff)}); "
                "compare like with like, or pass --force"
            )


def compare(now: dict[str, Any], then: dict[str, Any], tolerance: float) -> list[dict[str, Any]]:
    """Each figure of the services both runs hold, against the baseline: "regressed" or
    "improved" when the two runs' intervals across their rounds lie apart and the medians
    differ by more than the tolerance, else "within noise"; memory kept after the rounds
    against the tolerance and a floor."""
    found = []
    before = _index(then)
    for where, service in _index(now).items():
        old = before.get(where)
        if old is None:
            continue
        point, old_point = _point(service), _point(old)
        if point is None or old_point is None:
            continue
        intervals, old_intervals = (
            round_intervals(point["runs"]),
            round_intervals(old_point["runs"]),
        )
        for figure in FIGURES:
            a, b = old_intervals.get(figure), intervals.get(figure)
            if a is not None and b is not None:
                allowed = tolerance * abs(a.median)
                found.append(_comparison(where, figure, a, b, allowed, figure in HIGHER))
        old_kept = kept_memory(old)
        for device, kept in kept_memory(service).items():
            if device in old_kept:
                a, b = interval.single(old_kept[device]), interval.single(kept)
                allowed = max(tolerance * abs(a.median), KEPT_MEMORY_FLOOR_MIB)
                figure = f"kept memory {device} (MiB)"
                found.append(_comparison(where, figure, a, b, allowed, False))
    return found


def regressions(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in comparisons if c["state"] == "regressed"]


def _comparison(
    where: tuple[str, str],
    figure: str,
    then: interval.Interval,
    now: interval.Interval,
    allowed: float,
    higher_is_better: bool,
) -> dict[str, Any]:
    side = interval.apart(then, now) * (1 if higher_is_better else -1)
    state = STATES[side] if abs(now.median - then.median) > allowed else STATES[0]
    return {
        "host": where[0],
        "service": where[1],
        "figure": figure,
        "baseline": round(then.median, 3),
        "now": round(now.median, 3),
        "baseline_interval": then.to_dict(),
        "now_interval": now.to_dict(),
        "allowed": round(allowed, 3),
        "state": state,
        "text": f"{where[0]}/{where[1]}: {figure} {spread(then)} -> {spread(now)}: {state} "
        f"(tolerance {significant(allowed)})",
    }


def outliers(run: dict[str, Any], share: float = OUTLIER_SHARE) -> list[dict[str, Any]]:
    """Hosts whose request throughput is more than `share` below the median of the hosts
    running the same service with the same key."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for service in run["services"]:
        point = _point(service)
        value = point["median"].get("request_throughput") if point else None
        if value is not None:
            group = json.dumps([service["service"], service["key"]], sort_keys=True)
            groups.setdefault(group, []).append((service["host"], float(value)))
    found = []
    for group, values in groups.items():
        if len(values) < 2:
            continue
        middle = statistics.median(v for _, v in values)
        for host, value in values:
            if value < (1 - share) * middle:
                found.append({"host": host, "service": json.loads(group)[0],
                              "request_throughput": value, "fleet_median": middle})  # fmt: skip
    return found
