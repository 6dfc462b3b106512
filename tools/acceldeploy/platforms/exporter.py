"""What a platform's device exporter declares (``Exporter``), and what its plan is given.

Each platform's package holds its exporter (``acceldeploy.platforms.ascend.exporter``,
``acceldeploy.platforms.gaudi.exporter``), named by its class's ``device_exporter``;
``acceldeploy.monitor.device_exporters`` decides which host runs one, checks the operator's
artefacts and gives the exporter what it reads of the host (``ExporterInputs``).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")


@dataclass(frozen=True)
class Artefact:
    """An operator's file: on the controller (copied to the host) or at a URL (downloaded by
    the host, checked against its sha256)."""

    variable: str
    location: str
    checksum: str
    download_dir: str

    @property
    def remote(self) -> bool:
        return self.location.startswith(("http://", "https://"))

    @property
    def name(self) -> str:
        return posixpath.basename(self.location.split("?", 1)[0])

    @property
    def path(self) -> str:
        """Where it lands on the host."""
        return posixpath.join(self.download_dir, self.name)

    @property
    def archive(self) -> bool:
        return self.name.endswith(ARCHIVES)

    def to_dict(self) -> dict[str, Any]:
        return {"variable": self.variable, "location": self.location, "checksum": self.checksum,
                "remote": self.remote, "path": self.path, "archive": self.archive}  # fmt: skip


class ExporterInputs(Protocol):
    """What an exporter's plan reads of one host."""

    @property
    def host(self) -> str:
        """The host's inventory name, which every refusal starts with."""
        ...

    def text(self, variable: str) -> str:
        """The variable's value (else its role default) as stripped text."""
        ...

    def value(self, variable: str) -> Any:
        """The variable's value, else its role default."""
        ...

    def address(self) -> str:
        """The host's private address: where the monitors reach it, as node exporter binds."""
        ...

    def artefact(self, variable: str, checksum_variable: str, what: str) -> Artefact:
        """The file ``variable`` names, checked on the controller."""
        ...


@dataclass(frozen=True)
class Exporter:
    """A vendor's device exporter: its Prometheus job (its key in data/device-exporters.yml),
    how messages name it, the variable of its port, the variables of its artefact (the first
    one deploys it), the other variables its plan reads (its settings), its unit, the role's
    task file that deploys it (roles/monitor/tasks/), and how it is planned, which files it
    leaves on the host beside its unit file, and its unit's directives that depend on the
    host."""

    job: str
    name: str
    port_variable: str
    variables: tuple[str, ...]
    settings: tuple[str, ...]
    unit: str
    tasks: str
    plan: Callable[[ExporterInputs], dict[str, Any]]
    files: Callable[[Mapping[str, Any]], list[str]]
    directives: Callable[[Mapping[str, Any], Sequence[str], Sequence[str]], dict[str, Any]]

    @property
    def reads(self) -> tuple[str, ...]:
        """Every variable of the host its plan reads: its port, its artefact's, its settings."""
        return (self.port_variable, *self.variables, *self.settings)


def ip_allow(address: str, scrapers: Sequence[str]) -> list[str]:
    """Who may reach the exporter: this host and the monitors (as node exporter's drop-in)."""
    return ["localhost", *dict.fromkeys([address, *scrapers])]


def exec_line(argv: Sequence[str]) -> str:
    """An argv as a unit's Exec*= line: quoted, and % kept from systemd's specifiers."""
    return " ".join(shlex.quote(arg) for arg in argv).replace("%", "%%")
