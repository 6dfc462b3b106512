"""gateway's contract: the frontends and their servers, from the inventory, as the template
prints them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.gateway import plan as gateway_plan
from acceldeploy.inventory import groups
from acceldeploy.inventory import listeners as ports
from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.inventory.listeners import Listener
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles.contract import Contract

ROLE = "gateway"
GROUP = "gateways"
UNIT = "haproxy.service"


def serving(hosts: Sequence[str], hostvars: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """{host: {services, platform, address}} of the serving hosts (gateway_serving_hosts)."""
    return {
        host: gateway_plan.serving_view(
            host, plain(view.get("acceldeploy_services", [])),
            plain(view.get("acceldeploy_platform", "")), plain(view.get("ansible_host", "")),
        )
        for host, view in ((h, hostvars[h]) for h in hosts if h in hostvars)
    }  # fmt: skip


def serving_hosts(scope: Scope) -> list[str]:
    """gateway_serving_hosts, or (unset) every host of the inventory that serves models (outside
    the gateways and the monitors, or one of them that sets acceldeploy_serves)."""
    chosen = scope[f"{ROLE}_serving_hosts"]
    if chosen is None:
        return [h for h in scope.group("all") if groups.serves(scope.of(h))]
    return [str(h) for h in chosen]


def settings(scope: Scope) -> gateway_plan.Settings:
    return gateway_plan.Settings(
        bind=scope[f"{ROLE}_bind"],
        client_keys=len(scope[f"{ROLE}_client_keys"]) > 0,
        allow_unauthenticated=scope.flag(f"{ROLE}_allow_unauthenticated"),
        stats_port=int(scope[f"{ROLE}_stats_port"]),
        tls_certificate=scope[f"{ROLE}_tls_certificate"],
        routing=scope[f"{ROLE}_routing"],
        affinity_header=scope[f"{ROLE}_affinity_header"],
        affinity_balance_factor=scope[f"{ROLE}_affinity_balance_factor"],
    )


def plan(scope: Scope) -> dict[str, Any]:
    gateways = scope.hosts(scope.group(GROUP))
    reach = {host: str(plain(view.get("ansible_host", ""))) for host, view in gateways.items()}
    own = {host: plain(view.get("acceldeploy_services", [])) for host, view in gateways.items()}
    hosts = serving_hosts(scope)
    frontends = gateway_plan.plan(
        scope[f"{ROLE}_frontends"], serving(hosts, scope.hosts(hosts)), reach, settings(scope), own
    )
    return {
        "gateway_plan": [frontend.to_dict() for frontend in frontends],
        "gateway_backend_hosts": hosts,
    }


def backend_keys(hosts: Sequence[str], hostvars: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """{service: api key} of the serving hosts' models whose services want one (the keys
    map)."""
    return gateway_plan.backend_keys(serving(hosts, hostvars))


def paths(scope: Scope) -> dict[str, str]:
    return {
        name: str(scope[f"{ROLE}_{name}"])
        for name in ("config_file", "stats_socket", "state_file", "backend_keys_file",
                     "client_keys_file", "libexec_dir")
    }  # fmt: skip


def state_inputs(scope: Scope) -> dict[str, Any]:
    """Every input the files the role writes are made from (the keys themselves only hashed
    into the key)."""
    return {
        "plan": scope[f"{ROLE}_plan"],
        "backend_keys": backend_keys(scope[f"{ROLE}_backend_hosts"], scope.inventory),
        **{name: scope[f"{ROLE}_{name}"]
           for name in ("client_keys", "check", "timeouts", "retries", "stats_port",
                        "tls_certificate", "affinity_buffer")},
        "paths": list(paths(scope).values()),
    }  # fmt: skip


def footprint(scope: Scope) -> dict[str, list[str]]:
    where = paths(scope)
    return {
        "files": [where["config_file"], where["backend_keys_file"], where["client_keys_file"],
                  f"{where['libexec_dir']}/haproxy-save-state", str(scope[f"{ROLE}_dropin_file"])],
        "units": [UNIT],
    }  # fmt: skip


def listeners(scope: Scope) -> list[Listener]:
    """On a gateway: HAProxy's stats page, then each frontend."""
    hostvars = scope.of(scope.host)
    return ports.gateway_of(hostvars) if groups.in_group(hostvars, GROUP) else []


def ports_checked(scope: Scope) -> list[str]:
    return [scope.host]


CONTRACT = Contract(ROLE, plan, state_inputs=state_inputs, footprint=footprint,
                    listeners=listeners, ports_checked=ports_checked)  # fmt: skip
