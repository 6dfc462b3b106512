#!/usr/bin/python
"""The readiness gate of a multi-node group on one node: collect what the host says (its
interfaces, the listening ports and their units, dials to the peers, each NPU's hccn_tool
output), and let tools/acceldeploy/host/readiness/gate.py judge it. Read-only."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: acceldeploy_group_gate
short_description: Check a multi-node group's network before it starts or restarts
description:
  - Read-only, also in check mode; never reports changed.
  - C(stage=local) checks the node's interface and address, the ports it must open, dials
    every peer (the head's cluster port, a port of the ephemeral range) and, on Ascend, each
    NPU's link, health and address (C(hccn_tool), C(/etc/hccn.conf)); on Gaudi, each HPU's
    external ports (C(hl-smi -n ports), C(hl-smi -n link)). It returns the NPUs' addresses for
    the peers' pings.
  - C(stage=peers) pings, from each NPU in use, the peers' NPU of the same index
    (C(hccn_tool -i N -ping -g address ADDR)).
  - When I(restarting) is false the group is gated only if one of its units here is not
    running; a running, unchanged group is left alone.
  - Fails with every refusal, each naming the host, the NIC, port or device, and the fix.
options:
  gate:
    description: The node's checks (tools/acceldeploy/serving/cluster.py gate_spec).
    type: dict
    required: true
  stage:
    description: local or peers.
    type: str
    choices: [local, peers]
    default: local
  peer_npus:
    description: For stage=peers, {peer host => {NPU index => its address}}.
    type: dict
    default: {}
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Readiness gate
  acceldeploy.fleet.acceldeploy_group_gate:
    gate: "{{ unit.readiness }}"
"""

RETURN = r"""
gated:
  description: Whether the checks ran (false for a running group none of whose nodes restarts).
  type: bool
  returned: always
npu_addresses:
  description: "{NPU index: address} of the NPUs in use (stage=local, Ascend)."
  type: dict
  returned: always
"""

import contextlib
import glob
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The host-side code: the collection's module_utils (tools/acceldeploy), zipped by AnsiballZ.
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.readiness import (
    gate as readiness,
)
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.readiness import (
    hccn,
    hlports,
    procnet,
)

HCCN_CONF = "/etc/hccn.conf"


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def held_ports(ports: list[int]) -> dict[int, list[str]]:
    """{port: the units (or `pid N (comm)`) holding it in LISTEN} of the given ports."""
    inodes: dict[str, int] = {}
    for port, found in readiness.listening(procnet.sockets()).items():
        if port in ports:
            inodes.update({inode: port for inode in found})
    held: dict[int, list[str]] = {}
    if not inodes:
        return held
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        inode = target[8:-1] if target.startswith("socket:[") else ""
        if inode in inodes:
            pid = fd.split("/")[2]
            unit = readiness.unit_of(read(f"/proc/{pid}/cgroup"))
            owner = unit or f"pid {pid} ({read(f'/proc/{pid}/comm').strip()})"
            owners = held.setdefault(inodes[inode], [])
            if owner not in owners:
                owners.append(owner)
    return held


def run(module: AnsibleModule, argv: list[str]) -> str:
    rc, out, err = module.run_command(argv)
    return out if rc == 0 or out.strip() else (err or f"{' '.join(argv)}: exit {rc}")


def hccn_tool(module: AnsibleModule) -> str:
    path = module.get_bin_path("hccn_tool", opt_dirs=["/usr/local/Ascend/driver/tools"])
    if not path:
        module.fail_json(
            msg=f"{module.params['gate']['service']}: hccn_tool is not on this host (it comes "
            "with the Ascend driver, /usr/local/Ascend/driver/tools); install the driver before "
            "the group starts"
        )
    return str(path)


def hl_smi(module: AnsibleModule, gate: dict[str, Any]) -> dict[str, Any]:
    """The HPUs' buses, and each in-use bus's port types and link states."""
    tool = module.get_bin_path("hl-smi")
    if not tool:
        module.fail_json(
            msg=f"{gate['service']}: hl-smi is not on this host (it comes with the Intel Gaudi "
            "driver package); install the driver before the group starts"
        )
    bus_csv = run(module, [str(tool), "-Q", "module_id,bus_id", "-f", "csv,noheader"])
    found = hlports.buses(bus_csv)
    ports = {
        found[m]: {
            "ports": run(module, [str(tool), "-n", "ports", "-i", found[m]]),
            "link": run(module, [str(tool), "-n", "link", "-i", found[m]]),
        }
        for m in gate["hpus"]
        if m in found
    }
    return {"buses": bus_csv, "ports": ports}


def units_running(module: AnsibleModule, units: list[str]) -> bool:
    rc, _, _ = module.run_command(["systemctl", "is-active", "--quiet", *units])
    return bool(rc == 0)


def local(module: AnsibleModule, host: str, gate: dict[str, Any]) -> dict[str, Any]:
    _, ip_json, _ = module.run_command(["ip", "-j", "addr", "show"])
    seen: dict[str, Any] = {
        "ip_addr": ip_json,
        "held": held_ports([int(p["port"]) for p in gate["free_ports"]]),
        "dials": [
            {**d, "outcome": procnet.dial(d["address"], int(d["port"]))} for d in gate["dials"]
        ],
        "npus": [],
        "hccn_conf": read(HCCN_CONF) if gate["npus"] else "",
        "hl_smi": hl_smi(module, gate) if gate.get("hpus") else {},
    }
    addresses: dict[str, str] = {}
    if gate["npus"]:
        tool = hccn_tool(module)
        for device in gate["npus"]:
            one = {
                key: run(module, [tool, "-i", str(device), f"-{key}", "-g"])
                for key in ("link", "net_health", "ip")
            }
            seen["npus"].append(
                {"device": device, "link": one["link"], "health": one["net_health"],
                 "ip": one["ip"]}
            )  # fmt: skip
            with contextlib.suppress(Exception):  # judged (and named) by node_errors below
                addresses[str(device)] = readiness.npu_address(one["ip"])
    return {"errors": readiness.node_errors(host, gate, seen), "npu_addresses": addresses}


def peers(module: AnsibleModule, host: str, gate: dict[str, Any]) -> list[str]:
    tool = hccn_tool(module)
    errors: list[str] = []
    for device in gate["npus"]:
        pings = {
            address: run(module, [tool, "-i", str(device), "-ping", "-g", "address", address])
            for peer, npus in sorted(module.params["peer_npus"].items())
            for address in [npus.get(str(device), "")]
            if address and peer != host
        }
        errors += hccn.ping_errors(host, int(device), pings)
    return errors


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gate": {"type": "dict", "required": True},
            "stage": {"type": "str", "choices": ["local", "peers"], "default": "local"},
            "peer_npus": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    gate = module.params["gate"]
    host = str(gate["host"])
    if not gate.get("restarting") and units_running(module, list(gate["owners"])):
        module.exit_json(changed=False, gated=False, npu_addresses={})
    if module.params["stage"] == "peers":
        result = {"errors": peers(module, host, gate), "npu_addresses": {}}
    else:
        result = local(module, host, gate)
    if result["errors"]:
        module.fail_json(
            msg=f"{gate['service']}: the group's readiness gate refuses {host}:\n- "
            + "\n- ".join(result["errors"]),
            refusals=result["errors"],
            gated=True,
            npu_addresses=result["npu_addresses"],
        )
    module.exit_json(changed=False, gated=True, npu_addresses=result["npu_addresses"])


if __name__ == "__main__":
    main()
