"""Bench profiles: what load `tools/bench.py` sends, checked before any request.

A profile comes from data/bench-profiles.yml, overridden or extended by the inventory's
`acceldeploy_bench_profiles` (a mapping name -> fields). Every error names the variable and
the field, e.g. `acceldeploy_bench_profiles.smoke.image_reuse must be between 0 and 1`.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from acceldeploy import secrets
from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError

VAR = "acceldeploy_bench_profiles"
# Multi-turn chats: the load host/bench/conversations.py runs itself (the others are vLLM's).
CONVERSATIONS = "conversations"
DATASETS = ("images", "random", "random-mm", "sharegpt", "hf", CONVERSATIONS)
# What a conversations profile (host/bench/conversations.py) has no use for: it runs its own load,
# one conversation after another, not vLLM's at a rate.
NOT_CONVERSATIONS = (
    "request_rate",
    "sweep",
    "sla",
    "goodput",
    "image_reuse",
    "dataset_path",
    "hf_split",
    "ignore_eos",
    "warmups",
)
CONVERSATION_FIELDS = ("turns", "system_len", "first_image", "think_time", "session_header")
# SLA and goodput keys: vLLM's request-level metrics; SLA keys carry the statistic too.
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
SLA_STATS = ("mean", "median", "p50", "p90", "p99")
SLA_METRICS = ("ttft", "tpot", "itl", "e2el")
UNITS_MS = {"ms": 1.0, "s": 1000.0}
DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class Sweep:
    """The SLA search: one run at unlimited rate, then double from `start_rate` until the SLA
    fails (or `max_rate`), then bisect `bisect_steps` times between the last pass and fail."""

    start_rate: float = 1.0
    max_rate: float = 64.0
    bisect_steps: int = 3


@dataclass(frozen=True)
class Profile:
    name: str
    dataset: str
    prompts: int
    output_len: int = 16
    ignore_eos: bool = False  # every request generates output_len tokens
    input_len: int | None = None
    request_rate: float | None = None  # None: all at once (vLLM's inf)
    max_concurrency: int | None = None
    rounds: int = 3
    warmups: int = 0
    seed: int = 0
    image_reuse: float = 0.0
    image_sizes: list[list[int]] = field(default_factory=lambda: [[128, 96]])
    dataset_path: str | None = None
    hf_split: str | None = None
    goodput_ms: dict[str, float] = field(default_factory=dict)
    sla_ms: dict[str, float] = field(default_factory=dict)
    sweep: Sweep | None = None
    sample_interval: float = 0.5
    # conversations: turns per conversation, the shared system prompt's words, an image in the
    # first turn
    turns: int = 1
    system_len: int = 0
    first_image: bool = False
    think_time: float = 0.0  # seconds a user takes before the next turn
    session_header: bool = False  # each conversation names itself in X-Session-ID

    @property
    def distinct_images(self) -> int:
        """How many different images the `images` dataset holds (the rest repeat them)."""
        return max(1, math.ceil(self.prompts * (1.0 - self.image_reuse)))

    def to_dict(self) -> dict[str, Any]:
        """Its fields; a conversations field only on that dataset, so another profile's dict
        (and the run key's hash of it: baselines) is what it was before they existed."""
        found = asdict(self)
        if self.dataset != CONVERSATIONS:
            for name in CONVERSATION_FIELDS:
                del found[name]
        return found


def _where(name: str, key: str) -> str:
    return f"{VAR}.{name}.{key}"


def duration_ms(value: Any, where: str) -> float:
    """'500ms', '2s', '2.5 s' or a bare number (milliseconds) -> milliseconds."""
    if isinstance(value, bool):
        raise AcceldeployError(f"{where} must be a duration like 500ms or 2s, got {value!r}")
    if isinstance(value, int | float):
        number, unit = float(value), "ms"
    else:
        match = DURATION.match(str(value))
        if not match:
            raise AcceldeployError(f"{where} must be a duration like 500ms or 2s, got {value!r}")
        number, unit = float(match.group(1)), match.group(2).lower() or "ms"
    if unit not in UNITS_MS:
        raise AcceldeployError(
            f"{where}: unknown unit {unit!r} in {value!r}; use ms or s (e.g. 500ms, 2s)"
        )
    if number <= 0:
        raise AcceldeployError(f"{where} must be > 0, got {value!r}")
    return number * UNITS_MS[unit]


def _number(raw: dict[str, Any], name: str, key: str, kind: type, low: float, **opts: Any) -> Any:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AcceldeployError(f"{_where(name, key)} must be a number, got {value!r}")
    if kind is int and value != int(value):
        raise AcceldeployError(f"{_where(name, key)} must be a whole number, got {value!r}")
    above = opts.get("above", False)
    if (above and value <= low) or (not above and value < low):
        sign = ">" if above else ">="
        raise AcceldeployError(f"{_where(name, key)} must be {sign} {low:g}, got {value!r}")
    high = opts.get("high")
    if high is not None and value > high:
        raise AcceldeployError(f"{_where(name, key)} must be <= {high:g}, got {value!r}")
    return kind(value)


def _durations(raw: Any, name: str, key: str, allowed: tuple[str, ...]) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise AcceldeployError(f"{_where(name, key)} must be a mapping metric -> duration")
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise AcceldeployError(
            f"{_where(name, key)}: unknown metric {unknown[0]!r}; known: {', '.join(allowed)}"
        )
    return {k: duration_ms(v, f"{_where(name, key)}.{k}") for k, v in raw.items()}


FIELDS = {
    "dataset", "prompts", "output_len", "ignore_eos", "input_len", "request_rate",
    "max_concurrency", "rounds", "warmups", "seed", "image_reuse", "image_sizes", "dataset_path",
    "hf_split", "goodput", "sla", "sweep", "sample_interval", "turns", "system_len", "first_image",
    "think_time", "session_header",
}  # fmt: skip


def parse_profile(name: str, raw: Any, base: Path | None = None) -> Profile:
    """One profile from its mapping; relative sharegpt paths resolve against `base`."""
    if not isinstance(raw, dict):
        raise AcceldeployError(f"{VAR}.{name} must be a mapping of fields")
    unknown = sorted(set(raw) - FIELDS)
    if unknown:
        raise AcceldeployError(
            f"{_where(name, unknown[0])}: unknown field; known: {', '.join(sorted(FIELDS))}"
        )
    errors = secrets.url_credential_errors({f"{VAR}.{name}": raw})
    if errors:
        raise AcceldeployError(errors[0])
    dataset = raw.get("dataset")
    if dataset not in DATASETS:
        raise AcceldeployError(
            f"{_where(name, 'dataset')} must be one of {', '.join(DATASETS)}, got {dataset!r}"
        )
    prompts = _number(raw, name, "prompts", int, 1)
    if prompts is None:
        raise AcceldeployError(f"{_where(name, 'prompts')} is required (how many requests)")
    reuse = _number(raw, name, "image_reuse", float, 0, high=1.0)
    if reuse is not None and not reuse < 1.0:
        raise AcceldeployError(
            f"{_where(name, 'image_reuse')} must be between 0 and 1 (below 1), got {reuse!r}"
        )
    if reuse and dataset != "images":
        raise AcceldeployError(
            f"{_where(name, 'image_reuse')} applies to dataset: images only (got {dataset})"
        )
    path = raw.get("dataset_path")
    if dataset in ("sharegpt", "hf") and not path:
        raise AcceldeployError(
            f"{_where(name, 'dataset_path')} is required for dataset {dataset} "
            "(a local ShareGPT JSON, or the HF dataset id)"
        )
    if dataset == "sharegpt":
        local = Path(str(path)).expanduser()
        if not local.is_absolute() and base is not None:
            local = base / local
        if not local.is_file():
            raise AcceldeployError(
                f"{_where(name, 'dataset_path')}: {local} does not exist; point it at a local "
                "ShareGPT-shaped JSON file on the controller"
            )
        path = str(local)
    if dataset == CONVERSATIONS:
        _conversations(raw, name)
    elif set(raw) & set(CONVERSATION_FIELDS):
        key = sorted(set(raw) & set(CONVERSATION_FIELDS))[0]
        raise AcceldeployError(f"{_where(name, key)} applies to dataset: conversations only")
    if dataset in ("random", "random-mm", CONVERSATIONS) and raw.get("input_len") is None:
        raise AcceldeployError(f"{_where(name, 'input_len')} is required for dataset {dataset}")
    sizes = raw.get("image_sizes", [[128, 96]])
    if not (
        isinstance(sizes, list)
        and sizes
        and all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) and x > 0 for x in s)
            for s in sizes
        )
    ):
        raise AcceldeployError(
            f"{_where(name, 'image_sizes')} must be a list of [width, height] pairs, got {sizes!r}"
        )
    ignore_eos = raw.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise AcceldeployError(
            f"{_where(name, 'ignore_eos')} must be true or false, got {ignore_eos!r}"
        )
    sla = _durations(raw.get("sla"), name, "sla", sla_keys())
    sweep = _sweep(raw.get("sweep"), name, bool(sla))
    rate = _number(raw, name, "request_rate", float, 0, above=True)
    return Profile(
        name=name,
        dataset=dataset,
        prompts=prompts,
        output_len=_number(raw, name, "output_len", int, 1) or 16,
        ignore_eos=ignore_eos,
        input_len=_number(raw, name, "input_len", int, 1),
        request_rate=rate,
        max_concurrency=_number(raw, name, "max_concurrency", int, 1),
        rounds=_number(raw, name, "rounds", int, 1, high=100) or 3,
        warmups=_number(raw, name, "warmups", int, 0) or 0,
        seed=_number(raw, name, "seed", int, 0) or 0,
        image_reuse=reuse or 0.0,
        image_sizes=[list(s) for s in sizes],
        dataset_path=None if path is None else str(path),
        hf_split=None if raw.get("hf_split") is None else str(raw["hf_split"]),
        goodput_ms=_durations(raw.get("goodput"), name, "goodput", GOODPUT_METRICS),
        sla_ms=sla,
        sweep=sweep,
        sample_interval=_number(raw, name, "sample_interval", float, 0.2, high=5.0) or 0.5,
        turns=_number(raw, name, "turns", int, 1, high=100) or 1,
        system_len=_number(raw, name, "system_len", int, 0, high=100000) or 0,
        first_image=bool(raw.get("first_image", False)),
        think_time=_number(raw, name, "think_time", float, 0, high=3600) or 0.0,
        session_header=bool(raw.get("session_header", False)),
    )


def _conversations(raw: dict[str, Any], name: str) -> None:
    refused = sorted(set(raw) & set(NOT_CONVERSATIONS))
    if refused:
        raise AcceldeployError(
            f"{_where(name, refused[0])} does not apply to dataset: conversations (it runs "
            "max_concurrency conversations at a time, each turn after the last)"
        )
    if raw.get("turns") is None:
        raise AcceldeployError(f"{_where(name, 'turns')} is required for dataset conversations")
    for flag in ("first_image", "session_header"):
        if not isinstance(raw.get(flag, False), bool):
            raise AcceldeployError(f"{_where(name, flag)} must be true or false")


def sla_keys() -> tuple[str, ...]:
    return tuple(f"{stat}_{metric}" for stat in SLA_STATS for metric in SLA_METRICS)


def _sweep(raw: Any, name: str, has_sla: bool) -> Sweep | None:
    if raw is None:
        return None
    if not has_sla:
        raise AcceldeployError(
            f"{_where(name, 'sweep')} needs {_where(name, 'sla')} (the limits the rate must meet)"
        )
    if raw is True:
        return Sweep()
    if not isinstance(raw, dict):
        raise AcceldeployError(f"{_where(name, 'sweep')} must be true or a mapping")
    where = f"{name}.sweep"
    unknown = sorted(set(raw) - {"start_rate", "max_rate", "bisect_steps"})
    if unknown:
        raise AcceldeployError(f"{VAR}.{where}.{unknown[0]}: unknown field")
    start = _number(raw, where, "start_rate", float, 0, above=True) or 1.0
    top = _number(raw, where, "max_rate", float, 0, above=True) or 64.0
    if top < start:
        raise AcceldeployError(f"{VAR}.{where}.max_rate must be >= start_rate")
    steps = _number(raw, where, "bisect_steps", int, 0, high=10)
    return Sweep(start, top, 3 if steps is None else steps)


def builtin_profiles() -> dict[str, Any]:
    return load("bench-profiles")


def _raw_profiles(inventory_value: Any) -> dict[str, dict[str, Any]]:
    """The built-in profiles, then the inventory's (a field at a time)."""
    raw: dict[str, dict[str, Any]] = {k: dict(v) for k, v in builtin_profiles().items()}
    if inventory_value not in (None, ""):
        if not isinstance(inventory_value, dict):
            raise AcceldeployError(f"{VAR} must be a mapping of profile name -> fields")
        for name, fields in inventory_value.items():
            if not isinstance(fields, dict):
                raise AcceldeployError(f"{VAR}.{name} must be a mapping of fields")
            raw[str(name)] = {**raw.get(str(name), {}), **fields}
    return raw


def profiles(inventory_value: Any, base: Path | None = None) -> dict[str, Profile]:
    """Every profile, each checked."""
    raw = _raw_profiles(inventory_value)
    return {name: parse_profile(name, fields, base) for name, fields in raw.items()}


def pick(inventory_value: Any, name: str, base: Path | None = None) -> Profile:
    """The profile asked for; the others are checked after it (a typo anywhere is caught,
    the one asked for reported first)."""
    raw = _raw_profiles(inventory_value)
    if name not in raw:
        raise AcceldeployError(
            f"unknown bench profile {name!r}: known {', '.join(sorted(raw))}; add it under "
            f"{VAR} in the inventory"
        )
    chosen = parse_profile(name, raw[name], base)
    profiles(inventory_value, base)
    return chosen
