"""The inventory's groups that run no vLLM: the gateways (roles/gateway) and the monitors
(roles/monitor). Every other host serves: playbooks/groups.yml puts them in SERVING, the group
every play on the serving hosts names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GATEWAYS = "gateways"
MONITORS = "monitors"
NOT_SERVING = (GATEWAYS, MONITORS)
SERVING = "acceldeploy_serving"


def in_group(hostvars: Mapping[str, Any], group: str) -> bool:
    return group in (hostvars.get("group_names") or [])


def serves(hostvars: Mapping[str, Any]) -> bool:
    return not any(in_group(hostvars, group) for group in NOT_SERVING)


def serving_pattern(groups: Mapping[str, Sequence[str]]) -> str:
    """The host pattern of the serving hosts: all, less the non-serving groups the inventory
    has (naming a group it lacks would make Ansible warn)."""
    return ":".join(["all", *(f"!{group}" for group in NOT_SERVING if group in groups)])


def run_pattern(groups: Mapping[str, Sequence[str]]) -> str:
    """The host pattern of every host of the run, serving or not (preflight's pass checks
    them all)."""
    return "all"
