"""What a Gaudi node's own NIC ports report, read before a multi-node group starts: each HPU in
use, found by its module id, its bus from `hl-smi -Q module_id,bus_id -f csv,noheader`; its
ports' types from `hl-smi -n ports -i <bus>` (`port <N>: external|internal`) and their states
from `hl-smi -n link -i <bus>` (`port <N>: UP|DOWN`). An external port down refuses the node.

The formats: Intel's own health screen (HabanaAI/Setup_and_Install
utils/intel_gaudi_health_screen/IGNodes.py) parses them so; no public raw capture of an external
port exists (tests/data/recorded/SOURCES.md). A node whose HPUs have no external ports (Gaudi2E
scales out through host RDMA NICs) has nothing to check here: its NIC is the gate's interface
check. Host-side: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PORT = re.compile(r"^port\s+(\d+):\s*(\S+)", re.M)


def buses(csv_text: str) -> dict[str, str]:
    """`hl-smi -Q module_id,bus_id -f csv,noheader` -> {module id: PCI bus}."""
    found = {}
    for line in csv_text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit():
            found[fields[0]] = fields[1]
    return found


def ports(text: str) -> dict[int, str]:
    """`hl-smi -n ports` or `-n link` -> {port: its type, or its state}."""
    return {int(port): value for port, value in PORT.findall(text)}


def device_errors(host: str, module: str, bus: str, types: str, links: str) -> list[str]:
    """Refusals for one HPU: each external port not UP, naming the host, module, bus and ports."""
    external = [p for p, kind in sorted(ports(types).items()) if "external" in kind]
    states = ports(links)
    down = [p for p in external if states.get(p) != "UP"]
    if not down:
        return []
    seen = ", ".join(f"{p} {states.get(p, 'not reported')}" for p in down)
    return [
        f"{host}: HPU module {module} ({bus}): external port(s) {seen} (hl-smi -n link -i "
        f"{bus}); the group's scale-out runs over them: check their cables and switch ports "
        f"until they report UP, or leave module {module} out of the service"
    ]


def node_errors(host: str, modules: list[str], bus_csv: str,
                reports: Mapping[str, tuple[str, str]]) -> list[str]:  # fmt: skip
    """Every refusal for one node's HPUs in use; `reports`: {bus: (ports text, link text)}."""
    found, errors = buses(bus_csv), []
    for module in modules:
        bus = found.get(str(module))
        if bus is None:
            errors.append(
                f"{host}: HPU module {module} is not in hl-smi's list (hl-smi -Q module_id,bus_id:"
                f" {', '.join(sorted(found)) or 'none'}); fix the service's devices"
            )
            continue
        types, links = reports.get(bus, ("", ""))
        errors += device_errors(host, str(module), bus, types, links)
    return errors
