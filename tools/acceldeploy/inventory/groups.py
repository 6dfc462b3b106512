"""The inventory's groups that run no vLLM unless told: the gateways (roles/gateway) and the
monitors (roles/monitor). Every other host serves, and so does a gateway or monitor host that
sets acceldeploy_serves: true (a fleet of two servers, one of them also the gateway or the
monitor). playbooks/groups.yml puts the serving hosts in SERVING, the group every play on the
serving hosts names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GATEWAYS = "gateways"
MONITORS = "monitors"
NOT_SERVING = (GATEWAYS, MONITORS)
SERVING = "acceldeploy_serving"
SERVES_VAR = "acceldeploy_serves"


def in_group(hostvars: Mapping[str, Any], group: str) -> bool:
    return group in (hostvars.get("group_names") or [])


def role(hostvars: Mapping[str, Any]) -> str:
    """The first non-serving group the host is in (gateways, monitors), "" for none."""
    return next((group for group in NOT_SERVING if in_group(hostvars, group)), "")


def serves(hostvars: Mapping[str, Any]) -> bool:
    """The host runs vLLM: it is in no non-serving group, or it also serves (SERVES_VAR)."""
    return not role(hostvars) or hostvars.get(SERVES_VAR) is True


def serving_pattern(groups: Mapping[str, Sequence[str]], also_serving: Sequence[str] = ()) -> str:
    """The host pattern of the serving hosts: all, less the non-serving groups the inventory
    has (naming a group it lacks would make Ansible warn), but for a group one of whose hosts
    also serves (also_serving: those hosts): its hosts stay in the pattern, and the play's
    serves() test picks."""
    kept = [
        group for group in NOT_SERVING
        if group in groups and not set(groups[group]) & set(also_serving)
    ]  # fmt: skip
    return ":".join(["all", *(f"!{group}" for group in kept)])


def run_pattern(groups: Mapping[str, Sequence[str]]) -> str:
    """The host pattern of every host of the run, serving or not (preflight's pass checks
    them all)."""
    return "all"
