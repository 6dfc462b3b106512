"""One plan per host: inventory variables in, every service's unit out.

`plan_host(hostvars)` is the one pipeline from a host's variables to its ServiceUnits:
platform (profile + the host's stack) -> services -> launches (render.py, with the launcher's hook)
-> units (unit.py). Preflight, roles/vllm_service, tools/verify.py and `plan.py render` all
call it, so all four show the same command. `PLAN_VARS` names every variable it reads: the
roles gather exactly these (`query('ansible.builtin.vars', ...)`), the tools read them from the
inventory; a variable left unset takes the default its role documents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.roledefaults import value
from acceldeploy.planner.engineopts import platform_engine
from acceldeploy.planner.platforms import HostPlatform, get_platform
from acceldeploy.serving import cluster, dpnode, raynode, render
from acceldeploy.serving.launchers import launcher_for
from acceldeploy.serving.render import render_service
from acceldeploy.serving.service import Service, check_engine_values, parse_services
from acceldeploy.serving.unit import ServiceUnit, build
from acceldeploy.serving.values import HostContext, Launch, UnitOptions, var_name

# {hostname: address} of the hosts a multi-node service names (with_node_ips fills it)
NODE_IPS_VAR = "vllm_service_node_ips"
# python_env's variables that decide where the serving env lives (python_env_<key>).
ENV_KEYS = ("manager", "venv_path", "conda_root", "conda_env_path", "stacks_file")
DEFAULT_MODELS_ROOT = "/models"
PLAN_VARS: tuple[str, ...] = (
    "acceldeploy_platform",
    "acceldeploy_stack",
    "acceldeploy_services",
    "acceldeploy_models_root",
    *(f"python_env_{key}" for key in ENV_KEYS),
    *(var_name(f.name) for f in dataclasses.fields(UnitOptions)),
    "vllm_service_gaudi_shapes",
    "vllm_service_env_built",
    "inventory_hostname",
    NODE_IPS_VAR,
)


@dataclass(frozen=True)
class HostPlan:
    platform: HostPlatform
    services: list[Service]
    context: HostContext
    unit_options: UnitOptions

    def served(self) -> list[Service]:
        """The services whose vLLM server runs here: its own and the groups it heads."""
        return [s for s in self.services if not s.nodes or s.nodes[0] == self.context.host]

    def launches(self) -> list[Launch]:
        return [render_service(s, self.platform, self.context) for s in self.served()]

    def node_units(self) -> list[ServiceUnit]:
        """The node unit of every multi-node service this host is a node of: its Ray node
        (ray), its headless data-parallel rank (mp, every node but the head)."""
        return [
            (dpnode if s.headless_nodes else raynode).build_node(
                s, self.platform, self.context, self.unit_options
            )
            for s in self.services
            if cluster.runs_node_unit(s, self.context.host)
        ]

    def units(self) -> list[ServiceUnit]:
        """The servers' units; the head of a group with headless nodes watches its peers
        (dpnode.watch), as each of them watches it."""
        root, opts = self.context.models_root, self.unit_options
        units = []
        for service, launch in zip(self.served(), self.launches(), strict=True):
            unit = build(launch, self.platform, root, opts)
            if service.headless_nodes:
                place = render.node_place(service, self.context)
                unit = dataclasses.replace(
                    unit,
                    before_exec=dpnode.watch(place, self.platform, opts),
                    gate_prompts=2 * service.engines,
                )
            units.append(unit)
        return units


def _set(hostvars: Mapping[str, Any], name: str) -> Any:
    """A variable's value, None when unset or empty (the role's default applies)."""
    value = hostvars.get(name)
    return None if value in (None, "", [], {}) else value


def env_inputs(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """python_env's inputs that place the env (the same keys python_env_plan reads); unset
    ones take python_env's defaults."""
    inputs = {key: _set(hostvars, f"python_env_{key}") for key in ENV_KEYS}
    for key, given in inputs.items():
        if given is None:
            inputs[key] = value({}, f"python_env_{key}") or None
    return {
        "platform": str(hostvars.get("acceldeploy_platform") or ""),
        "stack": str(hostvars.get("acceldeploy_stack") or ""),
        **inputs,
    }


def host_plan(hostvars: Mapping[str, Any]) -> HostPlan:
    inputs = env_inputs(hostvars)
    stacks_file = inputs["stacks_file"]
    if stacks_file and not Path(str(stacks_file)).is_file():
        raise AcceldeployError(
            f"python_env_stacks_file {stacks_file} does not exist; point it at a stacks file "
            "of the shape of versions/stacks.yml, or leave it empty for that one"
        )
    platform = get_platform(
        inputs["platform"], inputs["stacks_file"], inputs["stack"], str(inputs["manager"] or "")
    )
    services = parse_services(hostvars.get("acceldeploy_services") or [], platform.name)
    for service in services:  # the engine options only when a service needs them
        check_engine_values(service, platform_engine(platform))
        cluster.check_node_env(service, platform)
        cluster.check_split(service, platform)
    context = HostContext(
        models_root=str(_set(hostvars, "acceldeploy_models_root") or DEFAULT_MODELS_ROOT),
        env_prefix=launcher_for(platform).env_prefix(
            inputs, _set(hostvars, "vllm_service_env_built")
        ),
        gaudi_shapes=dict(_set(hostvars, "vllm_service_gaudi_shapes") or {}),
        host=str(hostvars.get("inventory_hostname") or ""),
        node_ips=dict(_set(hostvars, NODE_IPS_VAR) or {}),
    )
    return HostPlan(platform, services, context, UnitOptions.from_hostvars(hostvars))


def with_node_ips(inventory: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every host's variables with the addresses of the nodes its services name (the tools
    that read an inventory; the role's contract computes the same:
    tools/acceldeploy/roles/vllm_service.py)."""
    return {
        host: {**hostvars, NODE_IPS_VAR: services_node_ips(
            hostvars.get("acceldeploy_services"), inventory)}
        for host, hostvars in inventory.items()
    }  # fmt: skip


def services_node_ips(services: Any, inventory: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """{node: address} of every host a host's acceldeploy_services name as nodes."""
    return node_ips(service_nodes(services), inventory)


def addresses(hosts: Sequence[str], inventory: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each of the hosts' address as the other hosts reach it (acceldeploy_node_ip, else
    ansible_host), of those the inventory holds."""
    return list(node_ips(list(hosts), inventory).values())


def node_ips(nodes: list[str], inventory: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """{node: address} of the named nodes that the inventory holds (the others are named as
    missing by cluster.place)."""
    return {n: cluster.node_ip(inventory[n], n) for n in nodes if n in inventory}


def service_nodes(services: Any) -> list[str]:
    """Every host the acceldeploy_services of a host name as nodes (unchecked input)."""
    named: list[str] = []
    for spec in services if isinstance(services, list) else []:
        nodes = spec.get("nodes") if isinstance(spec, Mapping) else None
        named += [n for n in nodes or [] if isinstance(n, str) and n not in named]
    return named


def node_view(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """The host's part in check_groups (its multi-node services), from its variables."""
    plan = host_plan(hostvars)
    return cluster.node_view(plan.platform.name, "", plan.services, plan.platform.stack)


def group_errors(views: Mapping[str, Mapping[str, Any]], pins: Mapping[str, str]) -> list[str]:
    """check_groups over the run's hosts; `pins`: {host: its python_env key}."""
    return cluster.check_groups(
        {host: {**view, "pins": pins.get(host, "")[:12]} for host, view in views.items()}
    )


def plan_host(hostvars: Mapping[str, Any]) -> list[ServiceUnit]:
    """Every unit the role installs on one host, from its variables: the node units of the
    multi-node services it is a node of (started first), then the vLLM services it runs."""
    plan = host_plan(hostvars)
    return with_gates(plan, [*plan.node_units(), *plan.units()])


def with_gates(plan: HostPlan, units: list[ServiceUnit]) -> list[ServiceUnit]:
    """Each group's readiness gate on this node, carried by the group's first unit here."""
    gated: set[str] = set()
    out = []
    for unit in units:
        service = next(
            (s for s in plan.services
             if s.nodes and unit.name in cluster.units_on(s, plan.context.host)), None,
        )  # fmt: skip
        if service is not None and service.name not in gated:
            gated.add(service.name)
            where = cluster.place(service, plan.context.host, plan.context.node_ips)
            unit = dataclasses.replace(unit, readiness=cluster.gate_spec(where, plan.platform))
        out.append(unit)
    return out


def host_launches(hostvars: Mapping[str, Any]) -> list[Launch]:
    return host_plan(hostvars).launches()
