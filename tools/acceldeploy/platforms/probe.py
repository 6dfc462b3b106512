"""What the runtime checks share: the verdict they build and reading the probe.

A probe is what a role's probe module (plugins/modules/acceldeploy_probe.py) read on a host:
``files`` (name -> {path, exists, content}), ``commands`` (name -> {found, rc, stdout,
stderr}), ``paths`` (path -> {exists, chr}) and ``groups`` (name -> exists).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from acceldeploy.errors import AcceldeployError

T = TypeVar("T")


@dataclass
class Verdict:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> dict[str, Any]:
        """The first keys of every runtime check's result: ok, errors, warnings, message."""
        return {
            "ok": self.ok,
            "errors": self.errors,
            "warnings": self.warnings,
            "message": "; ".join(self.errors),
        }


@dataclass
class CheckRun:
    """One runtime check on one host: its inputs, the verdict so far and what the checks found."""

    probe: dict[str, Any]
    stack: dict[str, Any]
    options: dict[str, Any]
    verdict: Verdict = field(default_factory=Verdict)
    detected: dict[str, Any] = field(default_factory=dict)

    def error(self, message: str) -> None:
        self.verdict.errors.append(message)

    def parsed(self, parse: Callable[[str], T], text: str, where: str) -> T | None:
        """parse(text), or None with the error recorded as `where: why`."""
        try:
            return parse(text)
        except AcceldeployError as exc:
            self.error(f"{where}: {exc}")
            return None

    def tool_output(self, result: dict[str, Any], tool: str, parse: Callable[[str], T]) -> T | None:
        """A probed command's stdout parsed, or None with why it failed recorded."""
        if int(result.get("rc", 1)) != 0:
            self.error(f"{tool} failed (rc {result.get('rc')}): {output_tail(result)}")
            return None
        return self.parsed(parse, str(result.get("stdout") or ""), tool)


def probed_file(probe: dict[str, Any], name: str) -> tuple[str | None, str]:
    """(content or None when absent, path) of a probed file."""
    entry = (probe.get("files") or {}).get(name) or {}
    content = entry.get("content") if entry.get("exists") else None
    return (str(content) if content is not None else None), str(entry.get("path") or name)


def probed_command(probe: dict[str, Any], name: str) -> dict[str, Any]:
    return dict((probe.get("commands") or {}).get(name) or {})


def output_tail(result: dict[str, Any]) -> str:
    """The last 300 characters of a failed command's stderr (or stdout)."""
    return str(result.get("stderr") or result.get("stdout") or "")[-300:].strip()


def char_device(probe: dict[str, Any], path: str) -> bool | None:
    """Whether a probed path is a character device; None when it does not exist."""
    entry = (probe.get("paths") or {}).get(path)
    if not entry or not entry.get("exists"):
        return None
    return bool(entry.get("chr"))


def device_node_errors(probe: dict[str, Any], nodes: list[str], hint: str) -> list[str]:
    """An error for each device node that is missing (``hint`` says why it may be) or is not
    a character device."""
    errors: list[str] = []
    for node in nodes:
        state = char_device(probe, node)
        if state is None:
            errors.append(f"device node {node} is missing: {hint}")
        elif not state:
            errors.append(f"{node} is not a character device")
    return errors


def service_devices(services: list[dict[str, Any]] | None) -> list[int]:
    """Every device id the services use, sorted, once each. A service or a device id of the
    wrong shape is skipped: the services' own check (serving.service) refuses it, naming it."""
    devices: set[int] = set()
    for service in services or []:
        if not isinstance(service, dict) or not isinstance(service.get("devices"), list):
            continue
        devices.update(d for d in service["devices"] if isinstance(d, int) and d >= 0)
    return sorted(devices)


def chosen_devices(chosen: list[Any] | None, services: list[dict[str, Any]] | None) -> list[Any]:
    """A runtime role's <role>_devices, or (unset) every device the host's services use."""
    return service_devices(services) if chosen is None else list(chosen)
