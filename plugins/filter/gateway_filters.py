"""Ansible adapter over acceldeploy.gateway (tools/acceldeploy/gateway/): the gateway role's
HAProxy plan, checked on the controller before any host is touched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.inventory.ansible_adapter import filters
from acceldeploy.roles import gateway


def gateway_backend_keys(hosts: Any, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """gateway_backend_hosts | gateway_backend_keys(hostvars): {service: api key} of the models
    whose services want one (the keys map)."""
    return gateway.backend_keys([str(h) for h in hosts], hostvars)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(gateway_backend_keys)
