"""The distribution's packages a bundle carries for the hosts whose roles install some (HAProxy on
the gateways, Prometheus on the monitors, node exporter everywhere a monitor watches): one flat
apt repository per Debian release and architecture, ``os/<suite>-<arch>/``
(acceldeploy.downloads.osrepo), with every dependency a host of that release could lack. The
bundle server serves it at ``/os/<suite>-<arch>/`` and the roles install from it alone. Other
releases' hosts are named: there, the package comes from the site's own mirror before the run (a
role leaves an installed package as it is)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy.downloads import osrepo
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway import plan as gateway_plan
from acceldeploy.monitor import targets

KIND = "os"
# What a repository holds: every package a role may install, whichever the hosts need, so one
# download serves every inventory of that release (and the cache is built once).
CARRIED = (*gateway_plan.PACKAGES, *targets.PACKAGES, *targets.NODE_PACKAGES)


@dataclass(frozen=True)
class Repo:
    suite: str
    arch: str
    packages: tuple[str, ...]
    hosts: tuple[str, ...]

    @property
    def name(self) -> str:
        """Its directory under os/ and its class in the manifest."""
        return f"{self.suite}-{self.arch}"

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "arch": self.arch, "packages": list(self.packages),
                "hosts": list(self.hosts)}  # fmt: skip


def host_packages(hostvars: Mapping[str, Any], monitored: bool) -> tuple[str, ...]:
    """The distribution's packages this host's roles install: HAProxy on a gateway,
    Prometheus on a monitor, and node exporter on every host of a monitored fleet."""
    packages = [*(gateway_plan.PACKAGES if gateway_plan.is_gateway(hostvars) else ()),
                *(targets.PACKAGES if targets.is_monitor(hostvars) else ()),
                *(targets.NODE_PACKAGES if monitored else ())]  # fmt: skip
    return tuple(packages)


def wanted(hosts: Mapping[str, Mapping[str, Any]]) -> tuple[list[Repo], list[str]]:
    """The repositories these hosts need, and a note for each host whose release the bundle
    cannot carry packages for."""
    found: dict[tuple[str, str], tuple[set[str], list[str]]] = {}
    notes = []
    monitored = any(targets.is_monitor(hv) for hv in hosts.values())
    for host, hv in sorted(hosts.items()):
        packages = host_packages(hv, monitored)
        if not packages:
            continue
        release = str(hv.get("acceldeploy_os") or "").lower()
        if not release:
            raise AcceldeployError(
                f"{host}: acceldeploy_os is not set; the bundle needs each gateway host's "
                f"release to carry its {', '.join(packages)} (for example debian-12)"
            )
        suite = osrepo.DEBIAN_SUITES.get(release)
        if suite is None:
            notes.append(
                f"{host}: the bundle carries apt packages for {', '.join(osrepo.DEBIAN_SUITES)} "
                f"only; install {', '.join(packages)} on this {release} host from the site's "
                "own mirror before the run"
            )
            continue
        arch = str(hv.get("acceldeploy_arch") or "x86_64")
        if arch not in osrepo.DEBIAN_ARCHES:
            raise AcceldeployError(
                f"{host}: acceldeploy_arch {arch!r}: use one of "
                f"{', '.join(osrepo.DEBIAN_ARCHES)} (uname -m)"
            )
        names, members = found.setdefault((suite, osrepo.DEBIAN_ARCHES[arch]), (set(), []))
        names.update(packages)
        members.append(host)
    repos = [Repo(suite, arch, tuple(sorted(names)), tuple(members))
             for (suite, arch), (names, members) in sorted(found.items())]  # fmt: skip
    return repos, notes


def fetch(repo: Repo, cache: Path) -> list[Path]:
    """The repository in the controller's cache (built when its recipe changed): its files,
    every package of CARRIED with its dependencies."""
    target = cache / "os-repos" / repo.name
    sources = osrepo.sources_list(repo.suite, osrepo.mirror())
    osrepo.ensure(target, sources, CARRIED, arch=repo.arch)
    return sorted(p for p in target.iterdir() if p.is_file() and p.name != osrepo.STAMP)


def indexed(index: Path) -> set[str]:
    """The package names a repository's Packages index lists."""
    if not index.is_file():
        return set()
    lines = index.read_text(errors="replace").splitlines()
    return {line.split(":", 1)[1].strip() for line in lines if line.startswith("Package:")}


def errors(directory: Path, repos: list[Repo], fix: str) -> list[str]:
    """A package these hosts need that the bundle's repository for them lacks."""
    found = []
    for repo in repos:
        absent = sorted(set(repo.packages) - indexed(directory / KIND / repo.name / "Packages"))
        if absent:
            found.append(
                f"the bundle {directory} has no {', '.join(absent)} for {', '.join(repo.hosts)} "
                f"(apt packages for {repo.name}); add them with `{fix}`"
            )
    return found
