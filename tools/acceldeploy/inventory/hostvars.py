"""Read an Ansible inventory the way a playbook sees it (group_vars, host_vars, Jinja)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.ansible_adapter import plain


def host_vars(inventory: str, host: str) -> dict[str, Any]:
    """The fully templated variables of one host, using Ansible's own machinery."""
    found = hosts_vars(inventory, host)
    if host not in found:
        known = ", ".join(sorted(hosts_vars(inventory, "all"))) or "none"
        raise AcceldeployError(f"host {host} is not in inventory {inventory} (hosts: {known})")
    return found[host]


class _AnyTagLoader(yaml.SafeLoader):
    """YAML as Ansible writes it (!vault, !unsafe), read for its syntax only."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)
YAML_SUFFIXES = ("", ".yml", ".yaml", ".json")


def _yaml_files(inventory: Path) -> list[Path]:
    """The inventory's YAML sources and the group_vars/host_vars files beside them."""
    base = inventory if inventory.is_dir() else inventory.parent
    sources = sorted(inventory.iterdir()) if inventory.is_dir() else [inventory]
    found = [p for p in sources if p.is_file() and p.suffix in (".yml", ".yaml")]
    for kind in ("group_vars", "host_vars"):
        where = base / kind
        if where.is_dir():
            found += [
                p for p in sorted(where.rglob("*")) if p.is_file() and p.suffix in YAML_SUFFIXES
            ]
    return found


def check_syntax(inventory: str) -> None:
    """Every YAML file of the inventory parses; else one line naming the file and the line
    (Ansible's own error names neither)."""
    for path in _yaml_files(Path(inventory)):
        try:
            yaml.load(path.read_text(), Loader=_AnyTagLoader)
        except UnicodeDecodeError as exc:
            raise AcceldeployError(
                f"inventory file {path}: not a text file (byte {exc.start} is not UTF-8)"
            ) from exc
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
            context = f" ({exc.context})" if exc.context else ""
            raise AcceldeployError(
                f"inventory file {where}: {exc.problem}{context}; fix its indentation or quoting"
            ) from exc
        except yaml.YAMLError as exc:
            raise AcceldeployError(f"inventory file {path}: {' '.join(str(exc).split())}") from exc


def _inventory(inventory: str) -> Any:
    """Ansible's own inventory of this file or directory: its YAML checked first, and at least
    one host in it."""
    if not os.path.exists(inventory):
        raise AcceldeployError(f"inventory {inventory} does not exist")
    check_syntax(inventory)
    os.environ.setdefault("ANSIBLE_DEPRECATION_WARNINGS", "false")
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    loader = DataLoader()
    try:
        manager = InventoryManager(loader=loader, sources=[inventory])
    except AnsibleError as exc:
        raise AcceldeployError(f"inventory {inventory}: {' '.join(str(exc).split())}") from exc
    if not manager.hosts:
        raise AcceldeployError(
            f"inventory {inventory} has no host: Ansible read no host from it (is its hosts "
            "file an inventory, with hosts under all: or a group?)"
        )
    return loader, manager


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
