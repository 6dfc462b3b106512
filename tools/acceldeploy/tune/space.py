"""The search space of `tools/tune.py`: axes are service keys the inventory already knows,
typed and checked before any restart; each point is the service's spec with those keys set.

    --space 'max_num_seqs=1,4 kv_cache_space_gib=1,2'
    --sla 'p99_ttft<=2s,p99_tpot<=100ms'
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acceldeploy.bench.profiles import duration_ms, sla_keys
from acceldeploy.errors import AcceldeployError
from acceldeploy.platforms import PLATFORMS, PlatformBehaviour, for_name


@dataclass(frozen=True)
class Axis:
    """Where an axis lands in a service spec: its own key, an extra_args flag or an env
    variable; `applies` asks a platform's class whether it takes the axis (none: every one)."""

    name: str
    kind: type
    place: str  # key | extra_args | env
    target: str
    applies: Callable[[PlatformBehaviour], bool] | None = None
    low: float = 0.0

    def platforms(self) -> list[str]:
        """The platforms that take it, by name, for the messages."""
        return [p.name for p in PLATFORMS if self.applies is None or self.applies(p)]


def _no_devices(platform: PlatformBehaviour) -> bool:
    return not platform.has_devices


AXES = {
    a.name: a
    for a in (
        Axis("max_num_seqs", int, "extra_args", "max-num-seqs", low=1),
        Axis("max_num_batched_tokens", int, "extra_args", "max-num-batched-tokens", low=1),
        Axis("mm_processor_cache_gb", float, "extra_args", "mm-processor-cache-gb"),
        Axis("gpu_memory_utilization", float, "key", "gpu_memory_utilization", low=0.01),
        Axis("max_model_len", int, "key", "max_model_len", low=1),
        # vLLM's CPU worker (a platform without devices) sizes its KV cache from this (GiB),
        # not from a memory share
        Axis("kv_cache_space_gib", int, "env", "VLLM_CPU_KVCACHE_SPACE", _no_devices, low=1),
    )
}


def _value(axis: Axis, text: str) -> Any:
    where = f"--space {axis.name}"
    try:
        value = axis.kind(text)
    except ValueError:
        noun = "a whole number" if axis.kind is int else "a number"
        raise AcceldeployError(f"{where}: {text!r} is not {noun}") from None
    if value < axis.low:
        raise AcceldeployError(f"{where}: {text} is below {axis.low:g}")
    return value


def parse_space(text: str, platform: str) -> list[tuple[Axis, list[Any]]]:
    """'a=1,2 b=3' -> [(axis a, [1, 2]), (axis b, [3])], in the order given."""
    axes: list[tuple[Axis, list[Any]]] = []
    for part in text.split():
        name, sep, values = part.partition("=")
        if not sep or not values:
            raise AcceldeployError(f"--space {part!r}: write AXIS=V1,V2 (e.g. max_num_seqs=4,8)")
        axis = AXES.get(name)
        if axis is None:
            raise AcceldeployError(f"--space {name}: unknown axis; known: {', '.join(AXES)}")
        if axis.applies is not None and not axis.applies(for_name(platform)):
            raise AcceldeployError(
                f"--space {name}: applies to {', '.join(axis.platforms())} only, not {platform}"
            )
        if any(a.name == name for a, _ in axes):
            raise AcceldeployError(f"--space {name}: given twice")
        parsed = [_value(axis, v) for v in values.split(",") if v]
        if not parsed:
            raise AcceldeployError(f"--space {name}: no values; write {name}=V1,V2")
        if len(set(parsed)) != len(parsed):
            raise AcceldeployError(f"--space {name}: a value is repeated")
        axes.append((axis, parsed))
    if not axes:
        raise AcceldeployError("--space is empty: give at least one AXIS=V1,V2")
    return axes


def parse_sla(text: str) -> dict[str, float]:
    """'p99_ttft<=2s,p99_tpot_ms<=100' -> {'p99_ttft': 2000.0, 'p99_tpot': 100.0}."""
    limits: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("<=")
        key = key.strip()
        if not sep:
            raise AcceldeployError(f"--sla {part!r}: write METRIC<=LIMIT (e.g. p99_ttft<=2s)")
        if key.endswith("_ms"):
            key, value = key[: -len("_ms")], f"{value.strip()}ms"
        if key not in sla_keys():
            raise AcceldeployError(f"--sla {key}: unknown metric; known: {', '.join(sla_keys())}")
        limits[key] = duration_ms(value.strip(), f"--sla {key}")
    if not limits:
        raise AcceldeployError("--sla is empty: give at least one METRIC<=LIMIT")
    return limits


def points(axes: list[tuple[Axis, list[Any]]]) -> list[dict[str, Any]]:
    """The grid, the last axis innermost: [{axis name: value}]."""
    names = [a.name for a, _ in axes]
    return [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))
    ]


def landings(point: dict[str, Any]) -> list[tuple[str | None, str, Any]]:
    """(section or None for the service's own key, key, value) per axis of a point."""
    out: list[tuple[str | None, str, Any]] = []
    for name, value in point.items():
        axis = AXES[name]
        if axis.place == "key":
            out.append((None, axis.target, value))
        else:
            out.append((axis.place, axis.target, str(value) if axis.place == "env" else value))
    return out


def apply(spec: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """The service spec with the point's values set where each axis lands."""
    out = {**spec}
    out["extra_args"] = dict(spec.get("extra_args") or {})
    out["env"] = dict(spec.get("env") or {})
    for section, key, value in landings(point):
        (out if section is None else out[section])[key] = value
    return out


def label(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())
