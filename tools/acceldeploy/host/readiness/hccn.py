"""What an Ascend node's NPU network reports, read before a multi-node group starts: the
output of `hccn_tool` (`-link -g`, `-net_health -g`, `-ip -g`, `-ping -g address <peer>`) and
`/etc/hccn.conf`, judged per device.

The formats are the tool's own (tests/data/recorded/SOURCES.md: captured output from an
8 x 910B1 host, and the print statements of the driver's hccn_tool sources). Each refusal
names the host, the device and what to do; nothing here runs a command.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...errors import AcceldeployError

LINK = re.compile(r"^link status: (UP|DOWN)\s*$", re.M)
HEALTH = re.compile(r"^net health status: (.+?)\s*$", re.M)
IPADDR = re.compile(r"^ipaddr:(\S+)\s*$", re.M)
NETMASK = re.compile(r"^netmask:(\S+)\s*$", re.M)
CONF = re.compile(r"^(address|netmask|netdetect|gateway|send_arp_status)_(\d+)=(\S*)\s*$")
PING_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received", re.M)
# What the tool itself takes as a failed ping (its MSG_RECV_TIMEOUT, MSG_DEST_UNREACHABLE,
# MSG_TOO_LONG).
PING_FAILURES = ("recv time out seq", "Destination Host Unreachable", "Message too long")
HEALTHY = "Success"


def _one(pattern: re.Pattern[str], text: str, what: str) -> str:
    found = pattern.search(text)
    if found is None:
        raise AcceldeployError(f"{what}: not in hccn_tool's output {text.strip()[:120]!r}")
    return found.group(1)


def link(text: str) -> str:
    """`hccn_tool -i N -link -g` -> UP or DOWN."""
    return _one(LINK, text, "link status")


def health(text: str) -> str:
    """`hccn_tool -i N -net_health -g` -> Success, Init, Fault, Receive timeout, ..."""
    return _one(HEALTH, text, "net health status")


def address(text: str) -> tuple[str, str]:
    """`hccn_tool -i N -ip -g` -> (ipaddr, netmask)."""
    return _one(IPADDR, text, "ipaddr"), _one(NETMASK, text, "netmask")


def conf(text: str) -> dict[int, dict[str, str]]:
    """/etc/hccn.conf -> {device: {address, netmask, netdetect, gateway, ...}}."""
    devices: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        found = CONF.match(line.strip())
        if found:
            key, device, value = found.groups()
            devices.setdefault(int(device), {})[key] = value
    return devices


@dataclass(frozen=True)
class Ping:
    sent: int
    received: int
    failures: tuple[str, ...]  # the lines the tool itself takes as failed

    @property
    def ok(self) -> bool:
        return self.sent > 0 and self.received == self.sent and not self.failures


def ping(text: str) -> Ping:
    """`hccn_tool -i N -ping -g address <peer>` -> what came back."""
    summary = PING_SUMMARY.search(text)
    failures = tuple(
        line.strip() for line in text.splitlines() if any(m in line for m in PING_FAILURES)
    )
    if summary is None:
        return Ping(0, 0, failures or (text.strip()[:120],))
    return Ping(int(summary.group(1)), int(summary.group(2)), failures)


@dataclass(frozen=True)
class DeviceReport:
    """What one device of a node said: the raw output of each hccn_tool call, and the ping
    output towards each peer device address."""

    device: int
    link: str
    health: str
    ip: str
    pings: Mapping[str, str]


def device_errors(
    host: str, report: DeviceReport, configured: Mapping[int, Mapping[str, str]]
) -> list[str]:
    """Refusals for one device, each naming the host, the device and the fix."""
    where, d = f"{host}: NPU {report.device}", report.device
    errors: list[str] = []
    state = link(report.link)
    if state != "UP":
        errors.append(
            f"{where}: link status {state} (hccn_tool -i {d} -link -g); fix the cable or switch "
            f"port of this device until it reports UP, or leave device {d} out of the service"
        )
    status = health(report.health)
    if status != HEALTHY:
        errors.append(
            f"{where}: net health status {status} (hccn_tool -i {d} -net_health -g); check its "
            f"detect address (hccn_tool -i {d} -netdetect -g) is reachable and not a reserved "
            "subnet, and the link, until it reports Success"
        )
    ip, mask = address(report.ip)
    wanted = configured.get(d, {})
    if wanted.get("address") and (wanted["address"], wanted.get("netmask", mask)) != (ip, mask):
        errors.append(
            f"{where}: /etc/hccn.conf gives address_{d}={wanted['address']} "
            f"netmask_{d}={wanted.get('netmask', '')}, but the device has {ip}/{mask} "
            f"(hccn_tool -i {d} -ip -g); set one of them to the other (hccn_tool -i {d} -ip -s "
            f"address {wanted['address']} netmask {wanted.get('netmask', mask)})"
        )
    return errors + ping_errors(host, d, report.pings)


def ping_errors(host: str, device: int, pings: Mapping[str, str]) -> list[str]:
    """Refusals for one device's pings ({peer device address: hccn_tool -ping output})."""
    errors = []
    for peer, output in sorted(pings.items()):
        result = ping(output)
        if not result.ok:
            seen = "; ".join(result.failures) or f"{result.received} of {result.sent} received"
            errors.append(
                f"{host}: NPU {device}: cannot reach the peer device address {peer} (hccn_tool "
                f"-i {device} -ping -g address {peer}: {seen}); check the two devices share a "
                "network (routes, VLAN, switch) and that TLS is set alike on both (hccn_tool -i "
                "N -tls -g)"
            )
    return errors


def node_errors(
    host: str, reports: Sequence[DeviceReport], hccn_conf: str
) -> list[str]:  # fmt: skip
    """Every refusal for one node's devices, against its /etc/hccn.conf."""
    configured = conf(hccn_conf)
    return [e for report in reports for e in device_errors(host, report, configured)]
