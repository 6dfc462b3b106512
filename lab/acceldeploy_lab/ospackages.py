"""The lab's own apt repository: the distribution's packages that roles install on a host (haproxy
for the gateway, prometheus and its node exporter for the monitor), downloaded once per suite on
the controller with apt-get against that suite's own sources and keyrings, only what the suite's
root filesystem lacks, and indexed with apt-ftparchive into a flat repository. The lab's wheel
server serves it at ``/os/<suite>/``; the hosts' sources.list names it and nothing else, so a
host never reaches the internet for a package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acceldeploy.bundle import ospackages as bundle_os
from acceldeploy.downloads import osrepo
from acceldeploy_lab import rootfs

PACKAGES: tuple[str, ...] = bundle_os.CARRIED


class OsPackagesError(Exception):
    pass


def repo_root(cache: Path) -> Path:
    return cache / "os"


def sources_line(url: str, repo: str) -> str:
    """A host's sources.list: the repository `repo` under url/os/, trusted (unsigned, local):
    the lab's own (<suite>), or on an isolated host the offline bundle's (<suite>-<arch>)."""
    return f"deb [trusted=yes] {url.rstrip('/')}/os/{repo}/ ./\n"


def ensure(
    cache: Path, suite: rootfs.Suite, root: Path, packages: tuple[str, ...] = PACKAGES
) -> dict[str, Any]:
    """``<cache>/os/<suite>/``: the packages and the dependencies ``root`` (the suite's root
    filesystem) lacks, from its own sources (acceldeploy.downloads.osrepo)."""
    try:
        return osrepo.ensure(
            repo_root(cache) / suite.name,
            (root / "etc/apt/sources.list").read_text(),
            packages,
            status=root / "var/lib/dpkg/status",
        )
    except osrepo.OsRepoError as exc:
        raise OsPackagesError(str(exc)) from None
