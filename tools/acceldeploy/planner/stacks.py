"""The serving stacks: ``versions/stacks.yml`` (``load_stacks``, ``host_stack``, ``stack``).

A host runs one named stack: the one its ``acceldeploy_stack`` names, else its platform's
default. The loader refuses a stack whose parts disagree (its vLLM, CANN, Gaudi software or
Python outside the lists its plugin supports), ``host_stack`` a choice of an unknown stack or
of another platform's. The keys each platform's stacks must set are its class's
(``acceldeploy.platforms``). The cpu stacks' lock files are read by ``lock_requirements``. The
files are the package's data (``data/versions/``; ``versions/`` at the repository's root is a
symlink to it). ``acceldeploy.planner.platforms`` and ``acceldeploy.runtimes`` both import
this module.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from acceldeploy.data_files import VERSIONS_DIR
from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import defects
from acceldeploy.planner.kvplan import KV_RULES
from acceldeploy.platforms import PLATFORMS, find, for_name, known_names

STACKS_FILE = VERSIONS_DIR / "stacks.yml"
STACK_VAR = "acceldeploy_stack"
# The command that records an engine's `vllm serve` options (data/engine-options/<name>.json).
RECORD_ENGINE_OPTIONS = (
    "python3 -m acceldeploy_lab.engine_options --out tools/acceldeploy/data/engine-options/"
    "{name}.json"
)

# What a stack's vLLM can split over hosts with --nnodes (backend nnodes): its TP, its PP.
NNODES_SPLITS = ("tensor", "pipeline")
# Gaudi's bucketing env names (serving/gaudi_launch.py) when a stack records none: the fork's.
DEFAULT_BUCKETING: dict[str, str] = {
    "prompt_bs": "VLLM_PROMPT_BS_BUCKET",
    "prompt_len": "VLLM_PROMPT_SEQ_BUCKET",
    "decode_bs": "VLLM_DECODE_BS_BUCKET",
    "decode_block": "VLLM_DECODE_BLOCK_BUCKET",
    "zero_padding": "VLLM_ZERO_PADDING",
    # NAME=value that selects linear buckets (the ranges below); vllm-gaudi 0.26 reads
    # VLLM_BUCKETING_STRATEGY=lin and only warns on the deprecated switch
    "linear": "VLLM_EXPONENTIAL_BUCKETING=false",
}
# vLLM's /metrics series the bench and the monitor read (by role), when a stack lists none:
# vLLM 0.12.0's names (vllm/v1/metrics/loggers.py), unchanged in 0.13.0. Counters carry the
# exposition's _total. The monitor renders its rules and figures with the names of the stacks
# it scrapes (acceldeploy.monitor.targets.series), refusing stacks that disagree on one.
DEFAULT_METRICS: dict[str, str] = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "preemptions": "vllm:num_preemptions_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "mm_cache_queries": "vllm:mm_cache_queries_total",
    "mm_cache_hits": "vllm:mm_cache_hits_total",
    "requests": "vllm:request_success_total",
    "generation_tokens": "vllm:generation_tokens_total",
    # a histogram, named without its suffix: the monitor reads its _bucket series
    # (loggers.py histogram_time_to_first_token, "vllm:time_to_first_token_seconds")
    "time_to_first_token": "vllm:time_to_first_token_seconds",
}


def _version(value: Any) -> Version | None:
    try:
        return Version(str(value))
    except InvalidVersion:
        return None


def listed(value: Any, allowed: Sequence[Any]) -> bool:
    """`value` is one of `allowed`: equal as versions (8.3.RC2 == 8.3.rc2), or inside a series
    entry ("1.22" admits 1.22.0 and 1.22.2)."""
    text = str(value).lower()
    for entry in allowed:
        item = str(entry).lower()
        if text == item or text.startswith(item + "."):
            return True
        ours, theirs = _version(text), _version(item)
        if ours is not None and ours == theirs:
            return True
    return False


def python_fits(python: Any, requires: str, where: str) -> bool:
    """A ``major.minor`` Python inside a Requires-Python specifier."""
    try:
        allowed = SpecifierSet(requires)
    except InvalidSpecifier as exc:
        raise AcceldeployError(f"{where}: requires_python {requires!r}: {exc}") from exc
    return Version(f"{python}.0") in allowed


def part_errors(entry: Mapping[str, Any]) -> list[str]:
    """The stack's own parts against the lists its plugin supports, one message per part."""
    name = entry["name"]
    checks = (
        ("vllm", "compatible_vllm", "vLLM"),
        ("cann", "compatible_cann", "CANN"),
        ("software", "compatible_software", "Intel Gaudi software"),
    )
    errors = []
    for key, allowed, label in checks:
        if entry.get(key) and entry.get(allowed) and not listed(entry[key], entry[allowed]):
            errors.append(
                f"stack {name}: its {key} is {label} {entry[key]}, outside its {allowed} "
                f"{', '.join(map(str, entry[allowed]))}; fix the stack's {key} or {allowed} "
                f"in {entry['file']}"
            )
    splits = sorted(set(entry.get("nnodes_split") or ()) - set(NNODES_SPLITS))
    if splits:
        errors.append(
            f"stack {name}: nnodes_split {', '.join(map(str, splits))} unknown; use "
            f"{', '.join(NNODES_SPLITS)} in {entry['file']}"
        )
    unknown = sorted(set(entry.get("kv_rules") or ()) - set(KV_RULES))
    if unknown:
        errors.append(
            f"stack {name}: kv_rules {', '.join(map(str, unknown))} unknown; use "
            f"{', '.join(KV_RULES)} (tools/acceldeploy/planner/kvplan.py) in {entry['file']}"
        )
    sdists = entry.get("sdist_only")
    if sdists is not None and not (
        isinstance(sdists, list) and all(isinstance(n, str) and n for n in sdists)
    ):
        errors.append(
            f"stack {name}: sdist_only {sdists!r} is not a list of package names (the packages "
            f"published as an sdist only, like [vllm-ascend]); fix it in {entry['file']}"
        )
    glibc = entry.get("wheel_glibc")
    if glibc is not None and not re.fullmatch(r"2\.\d+", str(glibc)):
        errors.append(
            f'stack {name}: wheel_glibc {glibc!r} is not a glibc version like "2.28" (the '
            f"manylinux_2_28 of its wheels); fix it in {entry['file']}"
        )
    errors += defects.errors(entry)
    requires = entry.get("requires_python")
    if entry.get("python") and requires:
        where = f"{entry['file']} {name}"
        if not python_fits(entry["python"], str(requires), where):
            errors.append(
                f"stack {name}: its python is {entry['python']}, outside its requires_python "
                f"{requires}; fix the stack's python or requires_python in {entry['file']}"
            )
    return errors


def load_stacks(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """versions/stacks.yml (or another file of the same shape), checked: the keys each
    platform uses, one default per platform, every stack's parts agreeing. Read and checked
    once per version of the file (a plan reads it for every host and role); each caller gets
    its own copy."""
    file = Path(path) if path else STACKS_FILE
    if not file.is_file():
        raise AcceldeployError(f"stacks file {file} does not exist")
    status = file.stat()
    return copy.deepcopy(_checked_stacks(file, status.st_mtime_ns, status.st_size))


@lru_cache(maxsize=8)
def _checked_stacks(file: Path, _mtime_ns: int, _size: int) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(file.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("stacks"), dict):
        raise AcceldeployError(f"{file}: expected a mapping `stacks:` of stack name -> stack")
    stacks: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for name, raw in data["stacks"].items():
        if not isinstance(raw, dict) or find(str(raw.get("platform") or "")) is None:
            raise AcceldeployError(
                f"{file}: stack {name} needs a platform, one of {', '.join(known_names())}"
            )
        entry = {**raw, "name": str(name), "file": str(file), "default": bool(raw.get("default"))}
        required = for_name(entry["platform"]).stack_keys
        missing = [k for k in required if entry.get(k) in (None, "")]
        if missing:
            raise AcceldeployError(f"{file}: stack {name} lacks {', '.join(missing)}")
        errors += part_errors(entry)
        stacks[str(name)] = entry
    for platform in PLATFORMS:
        defaults = [n for n, e in stacks.items() if platform.runs(e) and e["default"]]
        if len(defaults) != 1:
            found = ", ".join(defaults) or "none"
            errors.append(
                f"{file}: the {platform.name} platform needs exactly one stack with default: true "
                f"(found {found})"
            )
    if errors:
        raise AcceldeployError("; ".join(errors))
    return stacks


def runs_on(entry: Mapping[str, Any], platform: str) -> bool:
    """The stack is one of the platform called ``platform``'s (none of an unknown one's)."""
    chosen = find(platform)
    return chosen is not None and chosen.runs(entry)


def platform_stacks(platform: str, stacks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [name for name, entry in stacks.items() if runs_on(entry, platform)]


def stack(platform: str, path: str | Path | None = None) -> dict[str, Any]:
    """One platform's default stack; an error naming the known platforms if it has none."""
    stacks = load_stacks(path)
    for entry in stacks.values():
        if runs_on(entry, platform) and entry["default"]:
            return entry
    known = sorted({e["platform"] for e in stacks.values()})
    raise AcceldeployError(
        f"acceldeploy_platform {platform!r} has no pinned stack in "
        f"{path or STACKS_FILE}; use one of {', '.join(known)}"
    )


def host_stack(platform: str, chosen: str = "", path: str | Path | None = None) -> dict[str, Any]:
    """The stack a host runs: ``chosen`` (its acceldeploy_stack) if set, else the platform's
    default; refused naming the variable when unknown or of another platform."""
    if not chosen:
        return stack(platform, path)
    stacks = load_stacks(path)
    entry = stacks.get(chosen)
    if entry is None:
        ours = platform_stacks(platform, stacks) or sorted(stacks)
        raise AcceldeployError(
            f"{STACK_VAR} {chosen!r} is not a stack of {path or STACKS_FILE}; set it to one "
            f"of {', '.join(ours)}, or leave it unset for the {platform or 'platform'}'s default"
        )
    if platform and not runs_on(entry, platform):
        raise AcceldeployError(
            f"{STACK_VAR} {chosen!r} is a {entry['platform']} stack but the host's "
            f"acceldeploy_platform is {platform}; set {STACK_VAR} to one of "
            f"{', '.join(platform_stacks(platform, stacks))}, or leave it unset"
        )
    return entry


def stack_label(entry: Mapping[str, Any]) -> str:
    """How a refusal names the host's stack: ``acceldeploy_stack = <name>`` (and whether it is
    the platform's default, which a host runs when it sets none)."""
    name = entry.get("name") or f"of {entry.get('platform', 'the platform')}"
    default = f" (the {entry['platform']} default)" if entry.get("default") else ""
    return f"{STACK_VAR} = {name}{default}"


def other_stacks_hint(entry: Mapping[str, Any], key: str, value: Any) -> str:
    """ ", or set acceldeploy_stack to <the stacks of the same platform whose `key` list admits
    `value`>", empty when none does."""
    stacks = load_stacks(entry.get("file"))
    fits = [
        name
        for name, other in stacks.items()
        if name != entry.get("name")
        and runs_on(other, str(entry.get("platform") or ""))
        and listed(value, other.get(key) or [])
    ]
    return f", or set {STACK_VAR} to {' or '.join(fits)}" if fits else ""


def bucketing(entry: Mapping[str, Any]) -> dict[str, str]:
    """The stack's Gaudi bucketing env names; an empty name: that variable is not set."""
    given = entry.get("bucketing") or {}
    return {key: str(given.get(key, default) or "") for key, default in DEFAULT_BUCKETING.items()}


def metric_names(entry: Mapping[str, Any] | None) -> dict[str, str]:
    """role -> the vLLM /metrics series of that stack (its ``metrics``, else the defaults)."""
    given = (entry or {}).get("metrics") or {}
    unknown = sorted(set(given) - set(DEFAULT_METRICS))
    if unknown:
        raise AcceldeployError(
            f"stack {(entry or {}).get('name')}: metrics has unknown roles {', '.join(unknown)}; "
            f"use {', '.join(DEFAULT_METRICS)}"
        )
    return {**DEFAULT_METRICS, **{str(k): str(v) for k, v in given.items()}}


def engine_additions(entry: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(flag, choice) pairs the stack's plugin adds to `vllm serve`'s parser."""
    return tuple(
        (str(a["flag"]), str(a["choice"])) for a in entry.get("engine_option_additions") or []
    )


def installer_pin(pins: Iterable[str]) -> str | None:
    """The lock's pin of uv, the installer that installs the rest of it (None: pip does)."""
    return next((p for p in pins if p.split("==", 1)[0].strip().lower() == "uv"), None)


def lock_requirements(entry: dict[str, Any]) -> list[str]:
    """A cpu stack's pins: every ``name==version`` line of its lock, then the extras."""
    lock = Path(entry["file"]).parent / str(entry["lock"])
    if not lock.is_file():
        raise AcceldeployError(
            f"stack {entry['name']}: its lock {lock} is not recorded; make it with "
            "`python3 -m acceldeploy_lab.labenv lock` on a lab env of vLLM "
            f"{entry.get('vllm')}, or "
            f"set {STACK_VAR} to another {entry.get('platform', '')} stack"
        )
    pins: list[str] = []
    for raw in lock.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;]+", line):
            raise AcceldeployError(f"{lock}: not a name==version pin: {raw!r}")
        pins.append(line)
    ray = f"ray=={entry['ray']}"
    if ray not in pins:
        raise AcceldeployError(
            f"{lock} does not pin {ray} (versions/stacks.yml {entry['name']}.ray): regenerate it "
            "or change the stack's ray to the lock's"
        )
    return pins + [str(x) for x in entry.get("extra_requirements") or []]
