"""The pins a host builds from their sdists (a stack's ``sdist_only``, python_env_build_from_sdist)
in the controller's wheel cache: each pin's sdist, and wheels of what its build needs (its
``[build-system] requires``, else pip's for a project without one) for the host's CPython and
platform. pip builds with an isolated environment it fills from the same sources, so a host that
installs from the cache alone (``--no-index``) builds with these and nothing else.

Whether the cache has them is decided before any host changes, beside the lock's wheels
(``missing``, asked by acceldeploy.downloads.wheelcache); ``fetch`` adds what is missing.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from acceldeploy.downloads.tags import target_tags, wheels_by_pin

# pip's build requirements for a project whose pyproject.toml has no [build-system]
# (pip 23's, the one Debian 12's venv gets; later pips ask setuptools alone).
LEGACY_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")
SDIST_SUFFIXES = (".tar.gz", ".zip")


class SdistError(Exception):
    pass


def _stem(name: str, version: str) -> str:
    return f"{canonicalize_name(name)}-{Version(version)}"


def find(directory: Path, pin: str) -> Path | None:
    """The sdist of ``name==version`` in ``directory`` (its file name normalised as pip does:
    ``Six-1.17.0.tar.gz`` and ``six-1.17.0.tar.gz`` are one)."""
    name, _, version = pin.partition("==")
    wanted = _stem(name, version)
    for path in sorted(directory.glob("*")) if directory.is_dir() else []:
        suffix = next((s for s in SDIST_SUFFIXES if path.name.endswith(s)), "")
        base = path.name.removesuffix(suffix)
        dist, sep, found = base.rpartition("-")
        if suffix and sep and re.fullmatch(r"[0-9][0-9A-Za-z.+!_-]*", found):
            try:
                if _stem(dist, found) == wanted:
                    return path
            except ValueError:
                continue
    return None


def _pyproject(sdist: Path) -> str:
    """The text of the sdist's top-level pyproject.toml, empty when it has none."""
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1]
            found = [n for n in names if n.endswith("/pyproject.toml")]
            return archive.read(found[0]).decode() if found else ""
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if member.name.count("/") == 1 and member.name.endswith("/pyproject.toml"):
                handle = archive.extractfile(member)
                return handle.read().decode() if handle else ""
    return ""


def build_requires(sdist: Path) -> list[str]:
    """What building ``sdist`` needs installed: its [build-system] requires, else pip's."""
    text = _pyproject(sdist)
    try:
        system = tomllib.loads(text).get("build-system") if text else None
    except tomllib.TOMLDecodeError as exc:
        raise SdistError(f"{sdist.name}: its pyproject.toml does not parse: {exc}") from exc
    if not system or "requires" not in system:
        return list(LEGACY_BUILD_REQUIRES)
    return [str(r) for r in system["requires"]]


def _satisfied(directory: Path, requirement: str, python: str, arch: str, glibc_minor: int) -> bool:
    """A wheel in ``directory`` the target installs meets ``requirement``."""
    try:
        wanted = Requirement(requirement)
    except InvalidRequirement as exc:
        raise SdistError(f"build requirement {requirement!r}: {exc}") from exc
    marker_env = {"python_version": python, "platform_machine": arch, "sys_platform": "linux"}
    if wanted.marker and not wanted.marker.evaluate(marker_env):
        return True
    accepted = target_tags(python, arch, glibc_minor)
    return any(
        name == canonicalize_name(wanted.name)
        and version in wanted.specifier
        and any(tags & accepted for _, tags in wheels)
        for (name, version), wheels in wheels_by_pin(directory).items()
    )


def missing(
    directory: Path, pins: Iterable[str], python: str, arch: str, glibc_minor: int
) -> list[str]:
    """What the cache lacks to build ``pins`` on the target: ``six==1.17.0 (sdist)`` for a
    missing sdist, ``wheel (to build six)`` for a missing build requirement."""
    absent = []
    for pin in pins:
        sdist = find(directory, pin)
        if sdist is None:
            absent.append(f"{pin} (sdist)")
            continue
        name = pin.partition("==")[0]
        absent += [
            f"{req} (to build {name})"
            for req in build_requires(sdist)
            if not _satisfied(directory, req, python, arch, glibc_minor)
        ]
    return absent


def fetch(
    directory: Path,
    pins: Sequence[str],
    target: tuple[str, str, int],
    binary_argv: Sequence[str],
    run: Sequence[str],
    log: Path,
) -> list[str]:
    """Downloads into ``directory`` the sdist of each pin it lacks, then the build requirements
    no wheel there meets for ``target`` (CPython, architecture, glibc minor) with
    ``binary_argv`` (pip download for that target): a requirement the cache already meets is
    not fetched again, so the builds keep the versions the cache holds. Returns what it
    fetched."""
    fetched = []
    for pin in pins:
        sdist = find(directory, pin)
        if sdist is None:
            pip = [*run, "download", "--dest", str(directory), "--no-deps", "--no-binary=:all:"]
            _logged([*pip, pin], log)
            sdist = find(directory, pin)
            if sdist is None:
                raise SdistError(f"{pin}: pip downloaded no sdist of it into {directory}")
            fetched.append(pin)
        unmet = [r for r in build_requires(sdist) if not _satisfied(directory, r, *target)]
        if unmet:
            _logged([*binary_argv, *unmet], log)
            fetched += unmet
    return fetched


def _logged(argv: Sequence[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SdistError(f"{' '.join(argv[:6])} ... failed ({done.returncode}); see {log}")
