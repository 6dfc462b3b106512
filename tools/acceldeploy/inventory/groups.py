"""The inventory's groups that run no vLLM: the gateways (roles/gateway) and the monitors
(roles/monitor). Every other host serves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GATEWAYS = "gateways"
MONITORS = "monitors"
NOT_SERVING = (GATEWAYS, MONITORS)


def in_group(hostvars: Mapping[str, Any], group: str) -> bool:
    return group in (hostvars.get("group_names") or [])


def serves(hostvars: Mapping[str, Any]) -> bool:
    return not any(in_group(hostvars, group) for group in NOT_SERVING)
