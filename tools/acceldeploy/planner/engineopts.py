"""The `vllm serve` options of each platform's engine, checked on the controller.

vLLM's parser accepts abbreviations (`--max-num-seq`) and any number for most flags, so a
service's `extra_args` are checked here instead, exactly, against the option list recorded from
the pinned engine's own parser (data/engine-options/, made by lab/acceldeploy_lab/
engine_options.py: vLLM 0.12.0 for Ascend and the lab, HabanaAI/vllm-fork aice/v1.22.0 for
Gaudi): unknown or abbreviated flags, values of the wrong type, outside the choices, or outside
the documented ranges are refused naming the variable.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from acceldeploy.data_files import DATA_DIR
from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.stacks import RECORD_ENGINE_OPTIONS

# Documented lower bounds of flags people tune (vLLM's EngineArgs / SchedulerConfig docs);
# the parser itself accepts any integer or float.
MINIMUM: dict[str, float] = {
    "max-num-seqs": 1,
    "max-num-batched-tokens": 1,
    "max-num-partial-prefills": 1,
    "max-long-partial-prefills": 1,
    "mm-processor-cache-gb": 0,
    "swap-space": 0,
    "cpu-offload-gb": 0,
    "seed": 0,
    "max-logprobs": -1,
    "pipeline-parallel-size": 1,
    "data-parallel-size": 1,
}


def option_name(key: Any) -> str:
    """An engine option as vLLM's parser reads it: no leading dashes, '_' as '-'."""
    return str(key).lstrip("-").replace("_", "-")


@dataclass(frozen=True)
class EngineOptions:
    engine: str
    version: str
    options: Mapping[str, Mapping[str, Any]]  # every spelling of a flag -> its description

    def check(self, extra_args: Mapping[str, Any], var: str) -> None:
        for key, value in extra_args.items():
            flag = "--" + option_name(key)
            option = self.options.get(flag)
            if option is None or option.get("positional"):
                close = difflib.get_close_matches(flag, list(self.options), n=1, cutoff=0.75)
                hint = f"; did you mean {close[0].removeprefix('--')}?" if close else ""
                raise AcceldeployError(
                    f"{var}.{key}: {flag} is not an option of {self.engine} {self.version}'s "
                    f"`vllm serve`{hint}"
                )
            _check_value(flag, option, value, f"{var}.{key}")


# vLLM's human_readable_int: 25600, "25.6k" (x1000), "32K" (x1024), "1M", "1G".
HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kmgKMG]?)$")
SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}


def _number(value: Any, kind: str) -> float | None:
    if isinstance(value, bool):
        return None
    if kind == "human_readable_int":
        match = HUMAN.match(str(value))
        return float(match.group(1)) * SCALE[match.group(2)] if match else None
    try:
        return float({"int": int, "float": float}[kind](value))
    except (TypeError, ValueError):
        return None


def _check_value(flag: str, option: Mapping[str, Any], value: Any, var: str) -> None:
    if not option.get("takes_value"):
        if not isinstance(value, bool) and value is not None:
            raise AcceldeployError(f"{var} is a switch: set it to true (or false to leave it out)")
        return
    if value is None or value is False:
        return
    choices = option.get("choices")
    if choices and str(value) not in [str(c) for c in choices]:
        raise AcceldeployError(
            f"{var} must be one of {', '.join(map(str, choices))}, got {value!r}"
        )
    kind = str(option.get("type"))
    if kind not in ("int", "float", "human_readable_int"):
        return
    number = _number(value, kind)
    if number is None:
        noun = (
            "a number"
            if kind == "float"
            else "an integer (or 32k, 1M)"
            if "human" in kind
            else "an integer"
        )
        raise AcceldeployError(f"{var} must be {noun}, got {value!r}")
    low = MINIMUM.get(flag.removeprefix("--"))
    if low is not None and number < low:
        raise AcceldeployError(f"{var} must be >= {low:g}, got {value!r}")


@cache
def engine_options(
    name: str, additions: tuple[tuple[str, str], ...] = (), stack: str = ""
) -> EngineOptions:
    """data/engine-options/<name>.json, indexed by every spelling of every flag, with the
    choices the stack's plugin adds (``additions``: (flag, choice) pairs)."""
    path = DATA_DIR / "engine-options" / f"{name}.json"
    if not path.is_file():
        owner = f"stack {stack}: engine options {name}" if stack else f"engine options {name}"
        record = RECORD_ENGINE_OPTIONS.format(name=name)
        raise AcceldeployError(
            f"{owner} not recorded ({path} is missing); run `{record}` "
            "with that vLLM installed, or set acceldeploy_stack to a stack whose engine options "
            "are recorded"
        )
    data = json.loads(path.read_text())
    options: dict[str, Mapping[str, Any]] = {}
    for entry in data["options"].values():
        entry = _with_choices(entry, [c for f, c in additions if f in (entry.get("flags") or [])])
        for flag in entry.get("flags") or []:
            if str(flag).startswith("--"):
                options[str(flag)] = entry
    return EngineOptions(str(data["engine"]), str(data["version"]), options)


def _with_choices(entry: Mapping[str, Any], added: list[str]) -> Mapping[str, Any]:
    """An option with a plugin's extra choices (only where the parser restricts choices)."""
    if not added or not entry.get("choices"):
        return entry
    return {
        **entry,
        "choices": [*entry["choices"], *[c for c in added if c not in entry["choices"]]],
    }


def platform_engine(platform: Any) -> EngineOptions:
    """The engine options of a HostPlatform's stack (its file plus its plugin's additions)."""
    return engine_options(platform.engine_options, platform.engine_additions, platform.stack)
