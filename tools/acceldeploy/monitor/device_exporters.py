"""Which vendor device exporter a host runs, from the operator's artefacts.

Which exporter a platform's hosts run is its class's ``device_exporter``, declared in the
platform's package (``acceldeploy.platforms.ascend.exporter``: MindCluster's npu-exporter;
``acceldeploy.platforms.gaudi.exporter``: Intel's metric exporter through docker). Here: which
host runs it, the operator's artefacts checked, and what the exporter reads of the host.
A package or tarball is a file on the controller or an http(s) URL (with its sha256). Each
exporter goes only on the serving hosts of its platform whose inventory gives its artefact;
deploying it means scraping it (``monitor_device_exporters`` still adds the targets of
exporters the operator runs by other means). The role's templates print what is decided here
and in the platform's exporter. A mistake is refused naming the variable, before any host
changes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups, roledefaults
from acceldeploy.platforms import PLATFORMS, PlatformBehaviour, find
from acceldeploy.platforms.exporter import Artefact, Exporter
from acceldeploy.serving import cluster
from acceldeploy.serving.layout import UNIT_DIR

SHA256 = re.compile(r"[0-9a-f]{64}")
# By job, in the order the monitors' jobs list them (monitor/targets.py JOBS).
EXPORTERS: dict[str, Exporter] = {
    p.device_exporter.job: p.device_exporter for p in PLATFORMS if p.device_exporter
}
VIEW_KEYS = (*(key for e in EXPORTERS.values() for key in e.reads), "monitor_download_dir")


def _text(hostvars: Mapping[str, Any], variable: str) -> str:
    return str(roledefaults.value(hostvars, variable) or "").strip()


def of_behaviour(platform: PlatformBehaviour | None) -> Exporter | None:
    """The exporter a platform's hosts run (none: it has none, or no platform)."""
    return platform.device_exporter if platform else None


def of_platform(name: str) -> Exporter | None:
    """The exporter of the platform called ``name`` (none for none, or an unknown name)."""
    return of_behaviour(find(name))


def deployed(hostvars: Mapping[str, Any]) -> Exporter | None:
    """The exporter this host deploys: its platform's, on a serving host whose inventory gives
    its artefact; else none."""
    exporter = of_platform(str(hostvars.get("acceldeploy_platform") or ""))
    if exporter is None or not groups.serves(hostvars):
        return None
    return exporter if _text(hostvars, exporter.variables[0]) else None


def scraped(hostvars: Mapping[str, Any]) -> bool:
    """The monitors scrape this host's device exporter: deployed here, or run by the
    operator (monitor_device_exporters)."""
    return deployed(hostvars) is not None or bool(
        roledefaults.value(hostvars, "monitor_device_exporters")
    )


@cache
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _artefact(
    hostvars: Mapping[str, Any], variable: str, checksum_variable: str, what: str
) -> Artefact:
    """The file a variable names, checked on the controller: an absolute path to an existing
    file (matching its sha256 when one is given) or an http(s) URL with its sha256."""
    location = _text(hostvars, variable)
    checksum = _text(hostvars, checksum_variable).lower()
    artefact = Artefact(variable, location, checksum, _text(hostvars, "monitor_download_dir"))
    if checksum and not SHA256.fullmatch(checksum):
        raise AcceldeployError(
            f"{checksum_variable} must be the sha256 of {variable} (64 hex digits), got "
            f"{checksum!r}"
        )
    if artefact.remote:
        if not checksum:
            raise AcceldeployError(
                f"{variable} is a URL ({location}) but {checksum_variable} is empty: give the "
                f"sha256 of {what} (sha256sum prints it), so the host checks what it downloads"
            )
        return artefact
    if not location.startswith("/"):
        raise AcceldeployError(
            f"{variable} must be an absolute path on the controller or an http(s) URL of "
            f"{what}, got {location!r}"
        )
    local = Path(location)
    if not local.is_file():
        raise AcceldeployError(
            f"{variable}: {location} is not a file on the controller; put {what} there, or "
            "give an http(s) URL the hosts can download it from"
        )
    if checksum:
        stat = local.stat()
        if _sha256(location, stat.st_mtime_ns, stat.st_size) != checksum:
            raise AcceldeployError(
                f"{variable}: {location} does not match {checksum_variable} ({checksum}); "
                "give the file the checksum names, or its own sha256"
            )
    return artefact


def _misplaced(host: str, hostvars: Mapping[str, Any]) -> None:
    """An artefact given on a serving host of another platform, where its exporter cannot run."""
    platform = str(hostvars.get("acceldeploy_platform") or "")
    mine = of_platform(platform)
    for other in PLATFORMS:
        exporter = of_behaviour(other)
        if exporter is None or exporter is mine:
            continue
        for variable in exporter.variables:
            if _text(hostvars, variable):
                raise AcceldeployError(
                    f"{host}: {variable} is set but its acceldeploy_platform is "
                    f"{platform or 'not set'}; that exporter runs on {other.name} hosts only: "
                    f"set {variable} in the group_vars of the {other.name} hosts"
                )


def plan(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """What this host's device exporter is and how it runs ({'exporter': ''} for none); every
    input checked, naming the host and the variable."""
    try:
        return _plan(host, hostvars)
    except AcceldeployError as exc:
        message = str(exc)
        raise AcceldeployError(
            message if message.startswith(f"{host}: ") else f"{host}: {message}"
        ) from None


@dataclass(frozen=True)
class _HostInputs:
    """What an exporter's plan reads of one host (its ``ExporterInputs``)."""

    host: str
    hostvars: Mapping[str, Any]

    def text(self, variable: str) -> str:
        return _text(self.hostvars, variable)

    def value(self, variable: str) -> Any:
        return roledefaults.value(self.hostvars, variable)

    def address(self) -> str:
        return cluster.node_ip(self.hostvars, self.host)

    def artefact(self, variable: str, checksum_variable: str, what: str) -> Artefact:
        return _artefact(self.hostvars, variable, checksum_variable, what)


def _plan(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """Gateways and monitors inherit the fleet's variables and run no exporter. An exporter
    whose artefact is named in part (a tarball without its image) is refused by its plan."""
    if not groups.serves(hostvars):
        return {"exporter": ""}
    _misplaced(host, hostvars)
    exporter = of_platform(str(hostvars.get("acceldeploy_platform") or ""))
    if exporter is None or not any(_text(hostvars, v) for v in exporter.variables):
        return {"exporter": ""}
    return exporter.plan(_HostInputs(host, hostvars))


def _planned(planned: Mapping[str, Any]) -> Exporter | None:
    """The exporter a plan names (none for {'exporter': ''})."""
    return EXPORTERS.get(str(planned.get("exporter") or ""))


def owned(planned: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(files, units) the planned exporter leaves on the host: its files and its unit file,
    and its unit; nothing for none."""
    exporter = _planned(planned)
    if exporter is None:
        return [], []
    return [*exporter.files(planned), f"{UNIT_DIR}/{exporter.unit}"], [exporter.unit]


def unit(
    planned: Mapping[str, Any], scrapers: Sequence[str], device_nodes: Sequence[str] = ()
) -> dict[str, Any]:
    """The directives of the exporter's unit that depend on the host; the template names the
    rest."""
    exporter = _planned(planned)
    if exporter is None:
        raise AcceldeployError("no device exporter is planned on this host")
    return exporter.directives(planned, scrapers, device_nodes)


def metric_names(job: str) -> list[str]:
    """The metric names recorded from the vendor's documentation (data/device-exporters.yml)."""
    return list(load("device-exporters")[job]["metrics"])
