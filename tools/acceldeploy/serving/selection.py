"""The hosts bench.py and tune.py act on, planned as the roles plan them, before any contact:
every host's variables are read once (a multi-node service's head needs its nodes' addresses,
inside --limit or not), then the selected hosts are taken from them; a worker node of a
multi-node service serves nothing by itself, so it is refused naming its head."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import host_names, hosts_vars
from acceldeploy.serving.hostplan import HostPlan, host_plan, with_node_ips


def every_host(inventory: str) -> dict[str, dict[str, Any]]:
    """Every host's variables, with the addresses of the nodes its services name."""
    return with_node_ips(hosts_vars(inventory, "all"))


def limited(
    inventory: str, limit: str, every: Mapping[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """The variables of the hosts --limit selects (node addresses filled in), from `every`
    (every_host's) when the caller has read them already."""
    every = every_host(inventory) if every is None else every
    names = list(every) if limit == "all" else host_names(inventory, limit)
    if not names:
        raise AcceldeployError(f"no hosts in {inventory} match --limit {limit}")
    return {host: every[host] for host in names}


def checked_plan(hostvars: Mapping[str, Any]) -> HostPlan:
    """The host's plan with the checks the role makes of it: every unit it would install
    (the Ray node units of its multi-node services too) rendered."""
    plan = host_plan(hostvars)
    plan.node_units()
    plan.units()
    return plan


def heads(plan: HostPlan) -> dict[str, str]:
    """{service: its head} of every multi-node service this host is a worker node of."""
    host = plan.context.host
    return {s.name: s.nodes[0] for s in plan.services if s.nodes and s.nodes[0] != host}


def worker_error(flag: str, given: str, host: str, service: str, head: str) -> AcceldeployError:
    """`flag given` selected `host`, a worker node of `service`."""
    return AcceldeployError(
        f"{flag} {given}: {host} is a worker node of service {service}; its head {head} serves "
        f"it: use {flag} {head}"
    )
