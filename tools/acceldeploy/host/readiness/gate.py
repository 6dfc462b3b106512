"""The readiness gate of a multi-node group: what one node reports before its group starts or
restarts, judged. Read-only; the module acceldeploy_group_gate collects on the host, the
controller plans what each node checks (serving/cluster.py gate_spec).

A node's checks (the spec, plain data):
- its chosen interface (`network_interface`) exists, is up with a carrier, and carries the
  address the other nodes dial (`acceldeploy_node_ip`, else `ansible_host`);
- the ports it must open are free here, or held by this service's own units (the restart
  frees them): the head's cluster port (vLLM's data-parallel RPC port, or Ray's GCS port);
- every dial to a peer is answered: the head's cluster port, and a port of the ephemeral
  range on every peer, since the group also dials ZMQ, gloo and master ports it picks at
  start. A connection or a refusal (RST) is an answer; silence is a firewall's drop;
- Ascend: each NPU in use reports link UP and net health Success, its address agrees with
  /etc/hccn.conf, and the peers' NPUs of the same index answer a ping (hccn.py);
- Gaudi: each HPU in use has its external ports UP (hlports.py).

Host-side code (the module imports it), so only relative imports.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import hccn, hlports, procnet
from .procnet import ANSWERED, DIAL_TIMEOUT

# A port of Linux's default ephemeral range (ip_local_port_range 32768-60999): nothing need
# listen there; a refusal proves the path open as a connection does.
EPHEMERAL_PORT = 40961


@dataclass(frozen=True)
class Interface:
    name: str
    flags: tuple[str, ...]
    state: str
    networks: tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, ...]

    @property
    def up(self) -> bool:
        return "UP" in self.flags and "LOWER_UP" in self.flags

    def carries(self, address: str) -> bool:
        """The address is one of this interface's own; on loopback, any address of its prefix
        (the kernel's local route answers the whole 127.0.0.0/8)."""
        ip = ipaddress.ip_address(address)
        if any(n.ip == ip for n in self.networks):
            return True
        return "LOOPBACK" in self.flags and any(ip in n.network for n in self.networks)


def interfaces(ip_json: str) -> dict[str, Interface]:
    """`ip -j addr show` -> {name: Interface}."""
    found: dict[str, Interface] = {}
    for link in json.loads(ip_json or "[]"):
        networks = tuple(
            ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}")
            for a in link.get("addr_info", [])
            if a.get("family") in ("inet", "inet6") and "local" in a
        )
        name = str(link["ifname"])
        found[name] = Interface(
            name, tuple(link.get("flags", [])), str(link.get("operstate", "")), networks
        )
    return found


def listening(sockets: Sequence[procnet.Socket]) -> dict[int, set[str]]:
    """The host's sockets (procnet) -> {port: {socket inode}} of those in LISTEN."""
    ports: dict[int, set[str]] = {}
    for found in sockets:
        if found.state == procnet.LISTEN:
            ports.setdefault(found.local_port, set()).add(found.inode)
    return ports


def unit_of(cgroup: str) -> str:
    """/proc/<pid>/cgroup -> the systemd unit the process runs in ("" when none)."""
    for line in cgroup.splitlines():
        path = line.rsplit(":", 1)[-1]
        for part in reversed(path.split("/")):
            if part.endswith((".service", ".scope")):
                return part.rsplit(".", 1)[0]
    return ""


def _interface_errors(
    host: str, spec: Mapping[str, Any], found: Mapping[str, Interface]
) -> list[str]:
    address, nic, address_var = spec["address"], spec["interface"], spec["address_var"]
    names = ", ".join(sorted(found)) or "none"
    if nic and nic not in found:
        return [
            f"{host}: network_interface {nic} does not exist here (interfaces: {names}); set "
            "network_interface to the NIC on the network the nodes share"
        ]
    if nic and not found[nic].up:
        state = found[nic].state or "unknown"
        return [
            f"{host}: {nic} (network_interface) is not up (state {state}, flags "
            f"{','.join(found[nic].flags)}); bring it up (ip link set {nic} up) and check its "
            "cable and switch port until it has a carrier (LOWER_UP)"
        ]
    holders = [i for i in found.values() if i.carries(address)]
    if nic and found[nic] not in holders:
        has = ", ".join(str(n) for n in found[nic].networks) or "no address"
        return [
            f"{host}: {nic} (network_interface) does not carry {address}, the address the other "
            f"nodes dial ({address_var}); it has {has}: set {address_var} to this node's address "
            f"on {nic}, or network_interface to the NIC that carries {address}"
        ]
    if not holders:
        return [
            f"{host}: no interface here carries {address}, the address the other nodes dial "
            f"({address_var}); set {address_var} to this node's address on the network the "
            "nodes share"
        ]
    if not any(i.up for i in holders):
        return [
            f"{host}: {holders[0].name}, which carries {address}, is not up; bring it up "
            f"(ip link set {holders[0].name} up) until it has a carrier"
        ]
    return []


def _port_errors(
    host: str, spec: Mapping[str, Any], held: Mapping[int, Sequence[str]]
) -> list[str]:  # fmt: skip
    errors = []
    owners = set(spec["owners"])
    for port in spec["free_ports"]:
        others = sorted(set(held.get(int(port["port"]), [])) - owners)
        if others:
            errors.append(
                f"{host}: port {port['port']} ({port['what']}) is held by {', '.join(others)}; "
                f"stop that, or set {port['var']} to a port free on {host}"
            )
    return errors


def _dial_errors(
    host: str, spec: Mapping[str, Any], dials: Sequence[Mapping[str, Any]]
) -> list[str]:
    nic = spec["interface"] or "the nodes' network"
    errors = []
    for dial in dials:
        outcome, to = dial["outcome"], f"{dial['peer']} at {dial['address']}:{dial['port']}"
        if outcome in ANSWERED:
            continue
        if outcome == "timeout":
            why = f"no answer in {DIAL_TIMEOUT:g} s: a firewall drops it"
        else:
            why = f"{outcome}: no route between the nodes"
        errors.append(
            f"{host}: cannot reach {to} ({dial['what']}): {why}; allow all TCP between the "
            f"group's nodes on {nic} (the group also dials ports it picks at start), both ways"
        )
    return errors


def node_errors(host: str, spec: Mapping[str, Any], seen: Mapping[str, Any]) -> list[str]:
    """Every refusal for one node, each naming the host, the NIC, port or device, and the fix.
    `seen`: what the module collected (interfaces as `ip -j addr` text, held ports with their
    units, the dials' outcomes, each NPU's hccn_tool output and /etc/hccn.conf)."""
    errors = _interface_errors(host, spec, interfaces(seen["ip_addr"]))
    held = {int(port): units for port, units in seen["held"].items()}
    errors += _port_errors(host, spec, held)
    errors += _dial_errors(host, spec, seen["dials"])
    if spec["npus"]:
        reports = [
            hccn.DeviceReport(int(n["device"]), n["link"], n["health"], n["ip"], {})
            for n in seen["npus"]
        ]
        errors += hccn.node_errors(host, reports, seen["hccn_conf"])
    if spec.get("hpus"):
        hl = seen["hl_smi"]
        by_bus = {bus: (text["ports"], text["link"]) for bus, text in hl["ports"].items()}
        errors += hlports.node_errors(host, list(spec["hpus"]), hl["buses"], by_bus)
    return errors


def npu_address(ip_output: str) -> str:
    """An NPU's own address, for its peers' pings (`hccn_tool -i N -ip -g`)."""
    return hccn.address(ip_output)[0]
