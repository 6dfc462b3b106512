"""The Ansible inventory for the lab hosts (inventory/lab/hosts.yml)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from acceldeploy_lab import isolation
from acceldeploy_lab.rootfs import DEFAULT_SUITE, suite_named

GROUP = "lab"
GATEWAYS = "gateways"
MONITORS = "monitors"
HEADER = (
    "# Written by `tools/lab.py up`; rewritten on every up. Hosts are systemd-nspawn\n"
    "# containers on this machine sharing its network: each has its own sshd port.\n"
)
SSH_COMMON_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"


@dataclass(frozen=True)
class InventoryHost:
    name: str
    index: int
    ssh_port: int
    suite: str = DEFAULT_SUITE.name
    # The isolated lab: the host's address on the lab bridge (sshd on port 22 there).
    address: str = ""
    # In the gateways group (roles/gateway) or the monitors group (roles/monitor), not the
    # lab's serving group.
    gateway: bool = False
    monitor: bool = False


def inventory_data(
    hosts: list[InventoryHost], key: Path, cache: Path | None = None
) -> dict[str, Any]:
    """The lab group: its hosts, and the controller's cache (whose wheels/ the lab's wheel
    server serves) as python_env_wheel_cache when given."""
    entries: dict[str, Any] = {}
    gateways: dict[str, Any] = {}
    monitors: dict[str, Any] = {}
    for host in sorted(hosts, key=lambda h: h.index):
        group = gateways if host.gateway else monitors if host.monitor else entries
        group[host.name] = {
            "ansible_host": host.address or "127.0.0.1",
            "ansible_port": host.ssh_port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key.absolute()),
            "ansible_ssh_common_args": SSH_COMMON_ARGS,
            "ansible_python_interpreter": "/usr/bin/python3",
            "lab_index": host.index,
            "lab_suite": host.suite,
            # What a bundle is built for (acceldeploy bundle build): the host's release.
            "acceldeploy_os": "debian-" + suite_named(host.suite).release.split()[-1],
            "python_env_venv_python": f"/usr/bin/python{suite_named(host.suite).python}",
        }
    return {
        "all": {
            "children": {
                GROUP: {
                    "vars": {
                        "acceldeploy_platform": "cpu",
                        # Where this machine serves an offline bundle to the hosts
                        # (site.yml -e acceldeploy_bundle=DIR): its address on their network.
                        "acceldeploy_bundle_listen": (
                            isolation.CONTROLLER if any(h.address for h in hosts) else "127.0.0.1"
                        ),
                        **({"python_env_wheel_cache": str(cache)} if cache else {}),
                    },
                    "hosts": entries,
                },
                **({GATEWAYS: {"hosts": gateways}} if gateways else {}),
                **({MONITORS: {"hosts": monitors}} if monitors else {}),
            }
        }
    }


def write_inventory(
    path: Path, hosts: list[InventoryHost], key: Path, cache: Path | None = None
) -> Path:
    return _write(path, inventory_data(hosts, key, cache))


def drop_hosts(path: Path, names: list[str]) -> Path | None:
    """The inventory without these hosts (a group left empty goes too); None if absent."""
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text()) or {}
    children = data.get("all", {}).get("children", {})
    for group in list(children):
        members = children[group].get("hosts") or {}
        for name in names:
            members.pop(name, None)
        if group != GROUP and not members:
            del children[group]
    return _write(path, data)


def _write(path: Path, data: dict[str, Any]) -> Path:
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".hosts.", suffix=".yml", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(HEADER + body)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def read_inventory(path: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(path.read_text()) or {}
    hosts = data.get("all", {}).get("children", {}).get(GROUP, {}).get("hosts", {}) or {}
    return {str(name): dict(hostvars or {}) for name, hostvars in hosts.items()}
