"""Read an Ansible inventory the way a playbook sees it (group_vars, host_vars, Jinja)."""

from __future__ import annotations

import os
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.ansible_adapter import plain


def host_vars(inventory: str, host: str) -> dict[str, Any]:
    """The fully templated variables of one host, using Ansible's own machinery."""
    found = hosts_vars(inventory, host)
    if host not in found:
        known = ", ".join(sorted(hosts_vars(inventory, "all"))) or "none"
        raise AcceldeployError(f"host {host} is not in inventory {inventory} (hosts: {known})")
    return found[host]


def _inventory(inventory: str) -> Any:
    """Ansible's own inventory of this file or directory."""
    if not os.path.exists(inventory):
        raise AcceldeployError(f"inventory {inventory} does not exist")
    os.environ.setdefault("ANSIBLE_DEPRECATION_WARNINGS", "false")
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    loader = DataLoader()
    return loader, InventoryManager(loader=loader, sources=[inventory])


def host_names(inventory: str, pattern: str = "all") -> list[str]:
    """The hosts an Ansible pattern selects, in inventory order (nothing templated)."""
    _, manager = _inventory(inventory)
    return [entry.name for entry in manager.get_hosts(pattern)]


def hosts_vars(inventory: str, pattern: str = "all") -> dict[str, dict[str, Any]]:
    """Templated variables of every host matching an Ansible pattern. Not thread-safe
    (Ansible's plugin loader is not): call it before fanning out."""
    loader, manager = _inventory(inventory)
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    variables = VariableManager(loader=loader, inventory=manager)
    result: dict[str, dict[str, Any]] = {}
    for entry in manager.get_hosts(pattern):
        raw = variables.get_vars(host=entry)
        templated = plain(Templar(loader=loader, variables=raw).template(raw))
        assert isinstance(templated, dict)
        result[entry.name] = templated
    return result
