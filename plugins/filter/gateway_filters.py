"""Ansible adapter over acceldeploy.gateway (tools/acceldeploy/gateway/): the gateway role's
HAProxy plan, checked on the controller before any host is touched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.gateway import certificate, plan
from acceldeploy.inventory.ansible_adapter import filters, plain


def _serving(
    services: Mapping[str, Any], platforms: Mapping[str, Any], addresses: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    return {
        str(host): plan.serving_view(
            str(host), plain(value), platforms.get(host), addresses.get(host)
        )
        for host, value in services.items()
    }


def gateway_plan(
    frontends: Any,
    services: Mapping[str, Any],
    platforms: Mapping[str, Any],
    addresses: Mapping[str, Any],
    gateways: Mapping[str, Any],
    settings: Mapping[str, Any],
    gateway_services: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """gateway_frontends | gateway_plan({host: acceldeploy_services}, {host: platform},
    {host: address}, {gateway: address}, {bind, client_keys, allow_unauthenticated,
    stats_port, tls_certificate}[, {gateway: acceldeploy_services}]): the frontends and their
    servers, as the template prints them."""
    view = _serving(services, platforms, addresses)
    chosen = plan.Settings(**plain(dict(settings)))
    reach = {str(k): str(v) for k, v in gateways.items()}
    own = {str(k): plain(v) for k, v in (gateway_services or {}).items()}
    return [f.to_dict() for f in plan.plan(plain(frontends), view, reach, chosen, own)]


def gateway_backend_keys(
    services: Mapping[str, Any], platforms: Mapping[str, Any], addresses: Mapping[str, Any]
) -> dict[str, str]:
    """{service: api key} of the models whose services want one (the keys map)."""
    return plan.backend_keys(_serving(services, platforms, addresses))


def gateway_certificate_probe(path: str) -> str:
    """gateway_tls_certificate | gateway_certificate_probe: the read-only shell of preflight."""
    return certificate.probe(str(path))


def gateway_certificate_errors(stdout: str, path: str, host: str) -> list[str]:
    """probe stdout | gateway_certificate_errors(gateway_tls_certificate, inventory_hostname)"""
    return certificate.errors(str(stdout or ""), str(path), str(host))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(
            gateway_plan, gateway_backend_keys, gateway_certificate_probe,
            gateway_certificate_errors,
        )  # fmt: skip
