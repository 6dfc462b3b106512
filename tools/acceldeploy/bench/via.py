"""`acceldeploy bench --via-gateway GATEWAY`: each model the gateway publishes is loaded
through its frontend, so the figure is the fleet's in one run. The load runs from the first of
the frontend's serving hosts with a serving env (vLLM's `vllm bench serve` needs one), which
also gives the run's memory and vLLM metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from acceldeploy.bench.profiles import Profile
from acceldeploy.bench.runner import CacheReader, Target, Via, cache_reader
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway import plan as gateway_plan
from acceldeploy.inventory import roledefaults
from acceldeploy.serving import selection
from acceldeploy.serving.hostplan import HostPlan


def targets(
    every: Mapping[str, dict[str, Any]],
    gateway: str,
    services: list[str],
    profile: Callable[[Mapping[str, Any]], Profile],
) -> list[Target]:
    """One target per frontend of `gateway` (those named in `services`, or all), its profile
    `profile(hostvars of the load's host)`: all input checked, no host contacted."""
    hv = every.get(gateway)
    if hv is None or not gateway_plan.is_gateway(hv):
        known = ", ".join(h for h, v in every.items() if gateway_plan.is_gateway(v)) or "none"
        raise AcceldeployError(
            f"--via-gateway {gateway}: not a host of the gateways group (gateways: {known})"
        )
    serving, gateways = gateway_plan.fleet_views(every)
    frontends = gateway_plan.plan(
        hv.get("gateway_frontends"), serving, gateways, gateway_plan.settings(hv)
    )
    published = [f.service for f in frontends]
    unknown = sorted(set(services) - set(published))
    if unknown:
        raise AcceldeployError(
            f"--service {unknown[0]}: {gateway} does not publish it (gateway_frontends: "
            f"{', '.join(published)})"
        )
    keys = list(roledefaults.value(hv, "gateway_client_keys") or [])
    tls = bool(roledefaults.value(hv, "gateway_tls_certificate"))
    found = []
    for frontend in frontends:
        if services and frontend.service not in services:
            continue
        found.append(_target(every, gateway, frontend, keys[0] if keys else None, tls, profile))
    return found


def _target(
    every: Mapping[str, dict[str, Any]],
    gateway: str,
    frontend: gateway_plan.Frontend,
    key: str | None,
    tls: bool,
    profile: Callable[[Mapping[str, Any]], Profile],
) -> Target:
    servers = tuple(s.host for s in frontend.servers)
    plans = {host: selection.checked_plan(every[host]) for host in servers}
    caches = tuple(_cache(every[host], host, plans[host], frontend.service) for host in servers)
    for host in servers:
        hv, plan = every[host], plans[host]
        for unit, launch in zip(plan.units(), plan.launches(), strict=True):
            if unit.name == frontend.service and unit.argcheck_python:
                url = gateway_plan.url_from(
                    frontend,
                    gateway_plan.address(gateway, every[gateway]),
                    gateway_plan.address(host, hv),
                    tls,
                )
                via = Via(gateway, url, servers, key, caches)
                return Target(host, hv, plan, unit, launch, profile(hv), via=via)
    raise AcceldeployError(
        f"--via-gateway {gateway}: none of {frontend.service}'s hosts ({', '.join(servers)}) "
        "has a serving env on the host to run vLLM's benchmark client from (Gaudi's is in "
        "its container)"
    )


def _cache(hv: dict[str, Any], host: str, plan: HostPlan, service: str) -> CacheReader:
    unit = next(u for u in plan.units() if u.name == service)
    return cache_reader(host, hv, plan, unit)
