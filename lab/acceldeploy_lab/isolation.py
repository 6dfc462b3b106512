"""The isolated lab (``tools/lab.py up --isolated``): each host in its own network namespace
(systemd-nspawn ``--network-bridge``) on one bridge with the controller, and no other route.

    controller (this machine)  acclab0  10.213.0.1/24
    lab<i>                     host0    10.213.0.<10 + i>/24, no default route

The controller's input from the bridge is filtered by an nftables table of the lab's own: SSH
replies (connections the controller opened) and the offline bundle's server port pass,
everything else is dropped and counted. So "nothing but the bundle server was contacted" is a
counter that stays at zero (``counters``), not an absence of evidence. Host to host traffic
(the weights' and environments' fan-out) stays on the bridge.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence

BRIDGE = "acclab0"
NETWORK = "10.213.0"
PREFIX = 24
CONTROLLER = f"{NETWORK}.1"
HOST_OFFSET = 10
TABLE = "acceldeploy_lab"
# The bundle server's default port (acceldeploy bundle serve, acceldeploy_bundle_port).
ALLOWED_PORTS = (8093,)


class IsolationError(Exception):
    pass


def host_address(index: int) -> str:
    if not 1 <= index <= 200:
        raise IsolationError(f"lab{index}: the isolated lab numbers hosts 1 to 200")
    return f"{NETWORK}.{HOST_OFFSET + index}"


def _run(argv: Sequence[str], check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, input=stdin)
    if check and proc.returncode != 0:
        raise IsolationError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def missing_tools() -> list[str]:
    return [tool for tool in ("ip", "nft") if shutil.which(tool) is None]


def ruleset(ports: Sequence[int] = ALLOWED_PORTS) -> str:
    allowed = ", ".join(str(p) for p in ports)
    return f"""table inet {TABLE} {{
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname "{BRIDGE}" ct state established,related counter accept
    iifname "{BRIDGE}" tcp dport {{ {allowed} }} counter accept
    iifname "{BRIDGE}" icmp type echo-request counter accept
    iifname "{BRIDGE}" counter drop comment "lab-host-to-controller-other"
  }}
  chain forward {{
    type filter hook forward priority 0; policy accept;
    iifname "{BRIDGE}" oifname != "{BRIDGE}" counter drop comment "lab-host-beyond-bridge"
  }}
}}
"""


def ensure_bridge() -> None:
    """The bridge with the controller's address, and the lab's filter; idempotent."""
    missing = missing_tools()
    if missing:
        raise IsolationError(
            f"the isolated lab needs {', '.join(missing)} (apt-get install iproute2 nftables)"
        )
    links = json.loads(_run(["ip", "-j", "link", "show"]))
    if not any(link.get("ifname") == BRIDGE for link in links):
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addresses = json.loads(_run(["ip", "-j", "addr", "show", "dev", BRIDGE]))
    have = {a.get("local") for entry in addresses for a in entry.get("addr_info", [])}
    if CONTROLLER not in have:
        _run(["ip", "addr", "add", f"{CONTROLLER}/{PREFIX}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])
    _run(["nft", "delete", "table", "inet", TABLE], check=False)
    _run(["nft", "-f", "-"], stdin=ruleset())


def remove_bridge() -> bool:
    """The bridge and the filter gone; False when there was none."""
    _run(["nft", "delete", "table", "inet", TABLE], check=False) if shutil.which("nft") else None
    links = json.loads(_run(["ip", "-j", "link", "show"]))
    if not any(link.get("ifname") == BRIDGE for link in links):
        return False
    _run(["ip", "link", "delete", BRIDGE])
    return True


def counters() -> dict[str, int]:
    """Packets of each counted rule, by its comment (or its verdict and match)."""
    data = json.loads(_run(["nft", "-j", "list", "table", "inet", TABLE]))
    found: dict[str, int] = {}
    for item in data.get("nftables", []):
        rule = item.get("rule")
        if not rule:
            continue
        packets = next((e["counter"]["packets"] for e in rule["expr"] if "counter" in e), None)
        if packets is None:
            continue
        name = rule.get("comment") or json.dumps(rule["expr"][:-2], sort_keys=True)
        found[name] = found.get(name, 0) + int(packets)
    return found


def unit_file(address: str) -> str:
    """The host's side: its address on host0 before sshd starts (no default route)."""
    return f"""[Unit]
Description=acceldeploy lab: this host's address on the lab bridge
DefaultDependencies=no
Before=network.target ssh.service
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link set lo up
ExecStart=/sbin/ip addr replace {address}/{PREFIX} dev host0
ExecStart=/sbin/ip link set host0 up

[Install]
WantedBy=multi-user.target
"""
