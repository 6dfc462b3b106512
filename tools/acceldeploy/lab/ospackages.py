"""The lab's own apt repository: the distribution's packages that roles install on a host
(haproxy for the gateway), downloaded once per suite on the controller with apt-get against
that suite's own sources and keyrings, only what the suite's root filesystem lacks, and
indexed with apt-ftparchive into a flat repository. The lab's wheel server serves it at
``/os/<suite>/``; the hosts' sources.list names it and nothing else, so a host never reaches
the internet for a package."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from acceldeploy.lab import rootfs

PACKAGES: tuple[str, ...] = ("haproxy",)
STAMP = ".acceldeploy-repo.json"


class OsPackagesError(Exception):
    pass


def repo_root(cache: Path) -> Path:
    return cache / "os"


def sources_line(url: str, suite: rootfs.Suite) -> str:
    """A host's sources.list: the lab's repository for its suite, trusted (unsigned, local)."""
    return f"deb [trusted=yes] {url.rstrip('/')}/os/{suite.name}/ ./\n"


def _apt_options(root: Path, work: Path) -> list[str]:
    empty = work / "empty"
    empty.mkdir(exist_ok=True)
    options = {
        "Dir::State::status": root / "var/lib/dpkg/status",
        "Dir::Etc::SourceList": root / "etc/apt/sources.list",
        "Dir::Etc::SourceParts": empty,
        "Dir::Etc::Preferences": empty / "none",
        "Dir::Etc::PreferencesParts": empty,
        "Dir::Etc::TrustedParts": "/usr/share/keyrings",
        "Dir::State::Lists": work / "lists",
        "Dir::Cache": work / "cache",
        "Dir::Cache::archives": work / "archives",
        "Debug::NoLocking": "1",
        "APT::Install-Recommends": "false",
    }
    for sub in ("lists/partial", "archives/partial", "cache"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


def _run(argv: list[str], what: str, **kwargs: Any) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise OsPackagesError(f"{what} failed (exit {proc.returncode}): {proc.stderr[-600:]}")
    return str(proc.stdout)


def _digest(suite: rootfs.Suite, packages: tuple[str, ...]) -> str:
    recipe = {"rootfs": rootfs.recipe_digest(suite), "packages": sorted(packages)}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def ensure(
    cache: Path, suite: rootfs.Suite, root: Path, packages: tuple[str, ...] = PACKAGES
) -> dict[str, Any]:
    """``<cache>/os/<suite>/``: the packages and the dependencies ``root`` lacks, with
    Packages and Release; built beside and renamed into place, kept while the recipe holds."""
    target = repo_root(cache) / suite.name
    digest = _digest(suite, packages)
    stamp = target / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()).get("digest") == digest:
        return {"path": str(target), "built": False}
    if not shutil.which("apt-get") or not shutil.which("apt-ftparchive"):
        raise OsPackagesError("apt-get and apt-ftparchive are needed (make host-deps: apt-utils)")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    work = staging / ".apt"
    work.mkdir(parents=True)
    try:
        options = _apt_options(root, work)
        _run(["apt-get", "-q", *options, "update"], f"apt-get update for {suite.name}")
        _run(["apt-get", "-q", "-y", *options, "install", "--download-only", *packages],
             f"apt-get download of {' '.join(packages)} for {suite.name}")  # fmt: skip
        debs = sorted((work / "archives").glob("*.deb"))
        if not debs:
            raise OsPackagesError(f"apt-get downloaded nothing for {' '.join(packages)}")
        for deb in debs:
            deb.rename(staging / deb.name)
        shutil.rmtree(work)
        index = _run(["apt-ftparchive", "packages", "."], "apt-ftparchive packages", cwd=staging)
        (staging / "Packages").write_text(index)
        release = _run(["apt-ftparchive", "release", "."], "apt-ftparchive release", cwd=staging)
        (staging / "Release").write_text(release)
        (staging / STAMP).write_text(
            json.dumps({"digest": digest, "debs": [d.name for d in debs]}, indent=2) + "\n"
        )
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"path": str(target), "built": True, "debs": [d.name for d in debs]}
