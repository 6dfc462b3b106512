"""A distribution's packages as a flat apt repository (``<dir>/``: the .debs, Packages and
Release), for hosts that cannot reach their own archive: apt-get on the controller downloads
the packages and every dependency a host could lack against the release's own sources and
keyrings, and apt-ftparchive indexes them. The offline bundle carries one per Debian release
its gateway hosts run (``os/<suite>/``); the lab builds its own the same way, against what its
root filesystem already holds.

Each is built beside its place and renamed into it, and kept while its recipe holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from acceldeploy.errors import AcceldeployError

STAMP = ".acceldeploy-repo.json"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
# acceldeploy_os -> the Debian suite whose archive has its packages (data/targets.yml's rows).
DEBIAN_SUITES = {"debian-11": "bullseye", "debian-12": "bookworm", "debian-13": "trixie"}
# acceldeploy_arch (uname -m) -> the architecture's Debian name.
DEBIAN_ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}


class OsRepoError(AcceldeployError):
    pass


def mirror() -> str:
    return os.environ.get("ACCELDEPLOY_DEBIAN_MIRROR") or DEFAULT_MIRROR


def sources_list(suite: str, mirror_url: str) -> str:
    """A Debian suite's archive: main, its updates and (from bullseye on) <suite>-security."""
    return (
        f"deb {mirror_url} {suite} main\n"
        f"deb {mirror_url} {suite}-updates main\n"
        f"deb {SECURITY} {suite}-security main\n"
    )


def _apt_options(work: Path, sources: Path, status: Path, arch: str) -> list[str]:
    empty = work / "empty"
    empty.mkdir(exist_ok=True)
    options = {
        "Dir::State::status": status,
        "Dir::Etc::SourceList": sources,
        "Dir::Etc::SourceParts": empty,
        "Dir::Etc::Preferences": empty / "none",
        "Dir::Etc::PreferencesParts": empty,
        "Dir::Etc::TrustedParts": "/usr/share/keyrings",
        "Dir::State::Lists": work / "lists",
        "Dir::Cache": work / "cache",
        "Dir::Cache::archives": work / "archives",
        "Debug::NoLocking": "1",
        "APT::Install-Recommends": "false",
        "APT::Architecture": arch,
    }
    for sub in ("lists/partial", "archives/partial", "cache"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


def _run(argv: list[str], what: str, **kwargs: Any) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise OsRepoError(f"{what} failed (exit {proc.returncode}): {proc.stderr[-600:]}")
    return str(proc.stdout)


def recipe(sources: str, packages: tuple[str, ...], arch: str, status: Path | None) -> str:
    """What the repository is built from: a change to any of it builds it again."""
    installed = hashlib.sha256(status.read_bytes()).hexdigest() if status else ""
    data = {"sources": sources, "packages": sorted(packages), "arch": arch, "status": installed}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def read_stamp(target: Path) -> dict[str, Any]:
    stamp = target / STAMP
    return dict(json.loads(stamp.read_text())) if stamp.is_file() else {}


def ensure(
    target: Path,
    sources: str,
    packages: tuple[str, ...],
    arch: str = "amd64",
    status: Path | None = None,
) -> dict[str, Any]:
    """``target``: ``packages`` and their dependencies from ``sources`` (a sources.list), all
    of them, or (``status``: a dpkg status file) only those that status lacks."""
    digest = recipe(sources, packages, arch, status)
    if read_stamp(target).get("digest") == digest:
        return {"path": str(target), "built": False, "debs": read_stamp(target)["debs"]}
    if not shutil.which("apt-get") or not shutil.which("apt-ftparchive"):
        raise OsRepoError("apt-get and apt-ftparchive are needed (apt-get install apt-utils)")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    work = staging / ".apt"
    work.mkdir(parents=True)
    try:
        listed = work / "sources.list"
        listed.write_text(sources)
        if status is None:
            status = work / "status"
            status.write_text("")
        options = _apt_options(work, listed, status, arch)
        _run(["apt-get", "-q", *options, "update"], f"apt-get update for {target.name}")
        _run(["apt-get", "-q", "-y", *options, "install", "--download-only", *packages],
             f"apt-get download of {' '.join(packages)} for {target.name}")  # fmt: skip
        debs = sorted((work / "archives").glob("*.deb"))
        if not debs:
            raise OsRepoError(f"apt-get downloaded nothing for {' '.join(packages)}")
        for deb in debs:
            deb.rename(staging / deb.name)
        shutil.rmtree(work)
        index = _run(["apt-ftparchive", "packages", "."], "apt-ftparchive packages", cwd=staging)
        (staging / "Packages").write_text(index)
        release = _run(["apt-ftparchive", "release", "."], "apt-ftparchive release", cwd=staging)
        (staging / "Release").write_text(release)
        names = [d.name for d in debs]
        (staging / STAMP).write_text(json.dumps({"digest": digest, "debs": names}, indent=2))
        with tempfile.TemporaryDirectory(dir=target.parent) as old:
            if target.exists():
                target.rename(Path(old) / "previous")
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"path": str(target), "built": True, "debs": names}
