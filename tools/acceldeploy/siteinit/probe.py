"""`acceldeploy init`'s first contact: one read-only shell probe per host over SSH (preflight's
own, acceldeploy.inventory.targets.probe_script, plus the device tools and the NICs), read into
what the site's inventory needs: the release and its Python, the platform and its devices from
`npu-smi info` / `hl-smi`, and the host's addresses. Nothing on the host is changed."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import targets
from acceldeploy.platforms.ascend.smi import parse_npu_smi_info
from acceldeploy.platforms.gaudi.smi import parse_hl_smi

PYTHON = "python3"  # what Ansible's modules run with on the host (ansible_python_interpreter)
COMMANDS = {"npu-smi": ["npu-smi", "info"], "hl-smi": ["hl-smi"], "ip": ["ip", "-j", "addr"]}
SSH_TIMEOUT = 120  # seconds the whole probe of one host may take
MIB = 1 << 20


@dataclass(frozen=True)
class Target:
    """One host given to init: `name=address:port`, `address:port` or `address`."""

    name: str
    address: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Target:
        name, _, where = text.rpartition("=")
        address, port = where, 22
        if where.count(":") == 1:
            address, _, raw = where.partition(":")
            if not raw.isdigit() or not 0 < int(raw) < 65536:
                raise AcceldeployError(f"-H {text}: the port {raw!r} is not a TCP port")
            port = int(raw)
        if not address:
            raise AcceldeployError(f"-H {text}: no address; give name=address[:port]")
        return cls(name or address, address, port)


@dataclass(frozen=True)
class Nic:
    name: str
    up: bool
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class HostReport:
    """What one host told the probe, and why it cannot be part of the site (errors)."""

    target: Target
    facts: targets.Facts | None
    platform: str = "cpu"
    devices: tuple[int, ...] = ()
    device_mib: int | None = None  # the smallest device's memory, where the tool shows it
    device_name: str = ""
    nics: tuple[Nic, ...] = ()
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def os(self) -> str:
        """data/targets.yml's `<id>-<version>` (acceldeploy_os: what a bundle is built for)."""
        return f"{self.facts.os_id}-{self.facts.version_id}".lower() if self.facts else ""

    def summary(self) -> str:
        if not self.facts:
            return "unreachable"
        devices = f"{len(self.devices)} x {self.device_name or self.platform}"
        memory = f" ({self.device_mib // 1024} GiB each)" if self.device_mib else ""
        nics = ", ".join(f"{n.name} {'/'.join(n.addresses)}" for n in self.nics if n.up)
        return (
            f"{self.facts.pretty_name}, Python {self.facts.pythons.get(PYTHON)}, systemd "
            f"{self.facts.systemd}, {self.platform}"
            + (f": {devices}{memory}" if self.devices else "")
            + (f"; NICs up: {nics}" if nics else "")
        )


def script() -> str:
    return targets.probe_script({PYTHON: PYTHON}, commands=COMMANDS)


def ssh_argv(target: Target, user: str, key: str, ssh_args: str) -> list[str]:
    return [
        "ssh", "-p", str(target.port), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
        *(["-i", key] if key else []), *shlex.split(ssh_args),
        f"{user}@{target.address}", "sh -s",
    ]  # fmt: skip


def run_ssh(argv: Sequence[str], stdin: str) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=SSH_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return 255, "", f"no answer within {SSH_TIMEOUT} s"
    return done.returncode, done.stdout, done.stderr


def unreachable(rc: int, stdout: str, stderr: str) -> str | None:
    """Why a probe over SSH did not run (ssh's own failure, or no probe output), None when it
    did: its commands' exit status is the last one's, not the probe's."""
    if rc == 255 or "== os-release" not in stdout:
        return (stderr.strip().splitlines() or [f"ssh exited {rc}"])[-1]
    return None


def probe(
    target: Target,
    user: str,
    key: str = "",
    ssh_args: str = "",
    runner: Callable[[Sequence[str], str], tuple[int, str, str]] | None = None,
) -> HostReport:
    rc, stdout, stderr = (runner or run_ssh)(ssh_argv(target, user, key, ssh_args), script())
    why = unreachable(rc, stdout, stderr)
    if why is not None:
        return HostReport(
            target, None,
            errors=(f"{target.name}: unreachable over SSH as {user}@{target.address}:"
                    f"{target.port}: {why}; check the address, port, user and key",),
        )  # fmt: skip
    return read(target, stdout)


def read(target: Target, stdout: str) -> HostReport:
    """A host's report from its probe's output."""
    facts = targets.Facts.parse(stdout)
    errors = [
        *targets.release_errors(facts, allow_untested=False),
        *targets.systemd_errors(facts),
        *targets.interpreter_errors(facts, PYTHON, PYTHON, "Ansible's modules"),
    ]
    platform, devices, memory, name, device_errors = _devices(facts.commands)
    return HostReport(
        target=target,
        facts=facts,
        platform=platform,
        devices=devices,
        device_mib=memory,
        device_name=name,
        nics=nics(facts.commands.get("ip", {})),
        errors=tuple(f"{target.name}: {e}" for e in [*errors, *device_errors]),
    )


def _devices(
    commands: dict[str, dict[str, Any]],
) -> tuple[str, tuple[int, ...], int | None, str, list[str]]:
    """(platform, devices, smallest device memory MiB, device name, errors) from the tools."""
    npu, hl = commands.get("npu-smi", {}), commands.get("hl-smi", {})
    if npu.get("found") and hl.get("found"):
        return "cpu", (), None, "", ["both npu-smi and hl-smi are installed: which platform?"]
    tool, found = ("npu-smi info", npu) if npu.get("found") else ("hl-smi", hl)
    if not found.get("found"):
        return "cpu", (), None, "", []
    if found.get("rc") != 0:
        last = (found.get("stdout") or "").strip().splitlines()[-1:] or ["no output"]
        return "cpu", (), None, "", [
            f"{tool} failed (rc {found.get('rc')}): {last[0]}; the driver is not ready: install "
            "or repair it, then run init again"
        ]  # fmt: skip
    try:
        if npu.get("found"):
            info = parse_npu_smi_info(found["stdout"])
            sizes = [c.hbm_total_mb or c.memory_total_mb for c in info.chips]
            name = info.chips[0].name if info.chips else ""
            return "ascend", tuple(info.devices), _smallest(sizes), name, []
        hl_info = parse_hl_smi(found["stdout"])
        sizes = [d.memory_total_mib for d in hl_info.devices]
        devices = tuple(sorted(d.index for d in hl_info.devices))
        return "gaudi", devices, _smallest(sizes), hl_info.devices[0].name, []
    except AcceldeployError as exc:
        return "cpu", (), None, "", [f"{tool}: {exc}"]


def _smallest(sizes: Sequence[int | None]) -> int | None:
    known = [s for s in sizes if s]
    return min(known) if known else None


def nics(command: dict[str, Any]) -> tuple[Nic, ...]:
    """`ip -j addr`: every interface but loopback, with its IPv4 and global IPv6 addresses."""
    if not command.get("found") or command.get("rc") != 0:
        return ()
    try:
        rows = json.loads(command["stdout"])
    except ValueError:
        return ()
    found = []
    for row in rows:
        if "LOOPBACK" in row.get("flags", []):
            continue
        addresses = tuple(
            a["local"] for a in row.get("addr_info", [])
            if a.get("family") == "inet" or a.get("scope") == "global"
        )  # fmt: skip
        found.append(Nic(row.get("ifname", "?"), row.get("operstate") == "UP", addresses))
    return tuple(found)
