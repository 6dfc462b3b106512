"""Which wheels a target installs: the tags its CPython, architecture and glibc accept (pip's
own rules, from ``packaging.tags``), and the wheels of a directory by name and version."""

from __future__ import annotations

from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

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
