"""The pinned stack of each platform: ``versions/stacks.yml`` (``load_stacks``, ``stack``).

Loaded and checked for the keys the roles use; the cpu stack's lock file is read by
``lock_requirements``. This module imports nothing else from acceldeploy but its errors, so
``acceldeploy.planner.platforms`` and ``acceldeploy.runtimes`` can both import it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from acceldeploy.errors import AcceldeployError

REPO = Path(__file__).resolve().parents[3]
VERSIONS_DIR = REPO / "versions"
STACKS_FILE = VERSIONS_DIR / "stacks.yml"

# The keys each platform's stack must set (non-empty) for the roles to work.
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "ascend": (
        "python",
        "env_name",
        "vllm",
        "engine_options",
        "vllm_ref",
        "vllm_repo",
        "vllm_ascend",
        "vllm_ascend_ref",
        "vllm_ascend_repo",
        "torch",
        "torch_npu",
        "ray",
        "cann",
        "cann_compatible_drivers",
        "env_scripts",
    ),
    "gaudi": ("software", "image", "vllm_fork_ref", "vllm", "engine_options", "docker_run_args"),
    "cpu": ("python", "vllm", "engine_options", "lock", "ray"),
}


def load_stacks(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """versions/stacks.yml (or another file of the same shape), checked for the keys used."""
    file = Path(path) if path else STACKS_FILE
    if not file.is_file():
        raise AcceldeployError(f"stacks file {file} does not exist")
    data = yaml.safe_load(file.read_text())
    if not isinstance(data, dict):
        raise AcceldeployError(f"{file}: expected a mapping of platform -> stack")
    for platform, keys in REQUIRED_KEYS.items():
        entry = data.get(platform)
        if not isinstance(entry, dict):
            raise AcceldeployError(f"{file}: no {platform} stack")
        missing = [k for k in keys if entry.get(k) in (None, "")]
        if missing:
            raise AcceldeployError(f"{file}: {platform} stack lacks {', '.join(missing)}")
    stacks: dict[str, dict[str, Any]] = {}
    for platform, entry in data.items():
        stacks[str(platform)] = {**entry, "name": str(platform), "file": str(file)}
    return stacks


def stack(platform: str, path: str | Path | None = None) -> dict[str, Any]:
    """One platform's pinned stack; an error naming the known ones if it has none."""
    stacks = load_stacks(path)
    if platform not in stacks:
        raise AcceldeployError(
            f"acceldeploy_platform {platform!r} has no pinned stack in "
            f"{path or STACKS_FILE}; use one of {', '.join(sorted(stacks))}"
        )
    return stacks[platform]


def lock_requirements(entry: dict[str, Any]) -> list[str]:
    """The cpu stack's pins: every ``name==version`` line of its lock, then the extras."""
    lock = Path(entry["file"]).parent / str(entry["lock"])
    if not lock.is_file():
        raise AcceldeployError(f"the {entry['name']} stack's lock {lock} does not exist")
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
