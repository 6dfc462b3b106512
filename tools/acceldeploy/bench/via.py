"""`acceldeploy bench --via-gateway GATEWAY`: each model the gateway publishes is loaded
through its frontend, so the figure is the fleet's in one run. The load runs from the first of
the frontend's serving hosts with a serving env (vLLM's `vllm bench serve` needs one), which
also gives the run's memory and vLLM metrics. `--via-url URL` does the same through an
endpoint of the operator's (a router being compared with the gateway), in front of the hosts of
`--limit` that serve the one `--service`."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from acceldeploy.bench.profiles import Profile
from acceldeploy.bench.runner import CacheReader, Target, Via, cache_reader
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway import plan as gateway_plan
from acceldeploy.inventory import groups, roledefaults
from acceldeploy.serving import selection
from acceldeploy.serving.hostplan import HostPlan
from acceldeploy.serving.unit import ServiceUnit
from acceldeploy.serving.values import Launch

# --via-url's endpoint key, if it wants one: the variable vLLM's own bench client reads
KEY_VARIABLE = "OPENAI_API_KEY"


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
    host, unit, launch = _load_host(every, plans, frontend.service, f"--via-gateway {gateway}")
    url = gateway_plan.url_from(
        frontend,
        gateway_plan.address(gateway, every[gateway]),
        gateway_plan.address(host, every[host]),
        tls,
    )
    via = Via(gateway, url, servers, key, _caches(every, plans, frontend.service))
    return Target(host, every[host], plans[host], unit, launch, profile(every[host]), via=via)


def _load_host(
    every: Mapping[str, dict[str, Any]], plans: Mapping[str, HostPlan], service: str, what: str
) -> tuple[str, ServiceUnit, Launch]:
    """The first of the servers with a serving env to run the load from, and its unit."""
    for host, plan in plans.items():
        for unit, launch in zip(plan.units(), plan.launches(), strict=True):
            if unit.name == service and unit.argcheck_python:
                return host, unit, launch
    raise AcceldeployError(
        f"{what}: none of {service}'s hosts ({', '.join(plans)}) has a serving env on the "
        "host to run vLLM's benchmark client from (Gaudi's is in its container)"
    )


def _caches(
    every: Mapping[str, dict[str, Any]], plans: Mapping[str, HostPlan], service: str
) -> tuple[CacheReader, ...]:
    return tuple(
        cache_reader(host, every[host], plan, next(u for u in plan.units() if u.name == service))
        for host, plan in plans.items()
    )


def url_targets(
    every: Mapping[str, dict[str, Any]],
    url: str,
    service: str,
    profile: Callable[[Mapping[str, Any]], Profile],
) -> list[Target]:
    """`--via-url URL --service S`: the load through an endpoint the project does not deploy (a
    router of the operator's, or one being compared with the gateway) in front of `every`'s
    hosts that serve S; the fleet's figures read from those hosts. All input checked, no host
    contacted."""
    parsed = urllib.parse.urlsplit(url)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:  # a port that is no number, or out of range
        port = 0
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.hostname
        or not port
        or parsed.path not in ("", "/")
    ):
        raise AcceldeployError(
            f"--via-url {url}: give the endpoint's base URL, http(s)://HOST:PORT (no path: "
            "bench adds /v1/...)"
        )
    plans = {}
    for host, hv in every.items():
        if groups.serves(hv):
            plan = selection.checked_plan(hv)
            if any(unit.name == service for unit in plan.units()):
                plans[host] = plan
    if not plans:
        raise AcceldeployError(
            f"--service {service}: no selected host serves it, so --via-url has nothing behind it"
        )
    host, unit, launch = _load_host(every, plans, service, f"--via-url {url}")
    key = os.environ.get(KEY_VARIABLE)
    # where the run's files go and how its rows are named: no slashes
    name = f"url-{parsed.hostname}-{port}"
    via = Via(name, url.rstrip("/"), tuple(plans), key, _caches(every, plans, service))
    return [Target(host, every[host], plans[host], unit, launch, profile(every[host]), via=via)]
