"""Ansible adapter over acceldeploy.removal (tools/acceldeploy/removal/): playbooks/remove.yml's
plan, decided on the controller before any host changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.host.state.drift import show_blocks
from acceldeploy.inventory import groups
from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.removal import plan


def acceldeploy_removal_plan(
    choice: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    inventory_groups: Mapping[str, Any],
) -> dict[str, Any]:
    """{service, model, host} | acceldeploy_removal_plan(hostvars, groups): what each host
    loses and what the fleet keeps."""
    views, others = {}, {}
    for host in plain(list(inventory_groups.get("all") or [])):
        got = hostvars[host]
        role = groups.role(got)
        if role:
            others[host] = role
        if not groups.serves(got):
            continue
        views[host] = {k: plain(got[k]) for k in plan.HOST_VARS if k in got}
    return plan.plan(plain(dict(choice)), views, others).to_dict()


def acceldeploy_removal_loaded_units(show: str) -> list[str]:
    """The stdout of `systemctl show --property=Id,LoadState -- unit...` | this: the units
    systemd has loaded (the ones to stop and disable; a unit not there is "not-found")."""
    return [b["Id"] for b in show_blocks(str(show or "")) if b.get("LoadState") == "loaded"]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(acceldeploy_removal_plan, acceldeploy_removal_loaded_units)
