"""Ansible adapter over tools/acceldeploy (installed in the controller's venv by pyproject):
one host plan shared by preflight, the roles, verify and `plan.py render`."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import acceldeploy
from acceldeploy import secrets
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups, varcheck
from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.platforms import for_name
from acceldeploy.runtimes import stacklock
from acceldeploy.serving import cluster, hostplan
from acceldeploy.state import drift

# The collection's root (this repository, or where ansible-galaxy installed it): the roles,
# plugins and playbooks whose digest is part of every no-op key, the roles whose variables an
# inventory may set.
REPO = Path(__file__).resolve().parents[2]


def acceldeploy_plan_var_names(_: Any = None) -> list[str]:
    """Every variable the host plan reads (gather them with query('ansible.builtin.vars'))."""
    return list(hostplan.PLAN_VARS)


def acceldeploy_host_units(plan_vars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """{variable: value} of one host -> every service's unit (argv, env, directives, launcher,
    paths, argcheck, URLs). Bad input fails naming the variable, before anything is written."""
    values = {k: v for k, v in plain(dict(plan_vars)).items() if v is not None}
    return [unit.to_dict() for unit in hostplan.plan_host(values)]


def acceldeploy_node_ips(services: Any, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """acceldeploy_services | acceldeploy_node_ips(hostvars): {node: address} of every host
    its multi-node services name (acceldeploy_node_ip, else ansible_host)."""
    nodes = hostplan.service_nodes(plain(services))
    return hostplan.node_ips(nodes, {n: hostvars[n] for n in nodes if n in hostvars})


def acceldeploy_host_addresses(hosts: list[str], hostvars: Mapping[str, Any]) -> list[str]:
    """groups['gateways'] | acceldeploy_host_addresses(hostvars): each host's address as
    the other hosts reach it (acceldeploy_node_ip, else ansible_host)."""
    named = [str(h) for h in hosts]
    return list(hostplan.node_ips(named, {n: hostvars[n] for n in named if n in hostvars}).values())


def acceldeploy_node_view(plan_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The host's multi-node services as plain data, for acceldeploy_group_errors."""
    values = {k: v for k, v in plain(dict(plan_vars)).items() if v is not None}
    return hostplan.node_view(values)


def acceldeploy_group_errors(views: Mapping[str, Any], pins: Mapping[str, Any]) -> list[str]:
    """{host: node view} | acceldeploy_group_errors({host: python_env key}): every way the
    nodes of a multi-node service disagree, each naming the variable."""
    keys = {host: str(key) for host, key in plain(dict(pins)).items()}
    return hostplan.group_errors(plain(dict(views)), keys)


def acceldeploy_rollout(
    hosts: list[str], views: Mapping[str, Any], serial: Any, idle: Any = ()
) -> dict[str, Any]:
    """ansible_play_hosts | acceldeploy_rollout({host: node view}, vllm_service_serial,
    [hosts serving nothing now]): the serve play's batches, a multi-node group always in one
    batch, the idle hosts together first (cluster.rollout)."""
    return cluster.rollout(
        [str(h) for h in hosts], plain(dict(views)), plain(serial), {str(h) for h in idle}
    )


def acceldeploy_gates_for_run(units: Any, hostvars: Any) -> list[dict[str, Any]]:
    """vllm_service_units | acceldeploy_gates_for_run(hostvars): the readiness gate of each
    group this host is a node of, marked `restarting` when any node restarts one of the
    group's units in this run (its vllm_service_restart)."""
    gates = [u["readiness"] for u in plain(list(units)) if u.get("readiness")]
    nodes = {node for gate in gates for node in gate["units_by_node"]}
    restarts = {
        n: plain(hostvars[n].get("vllm_service_restart") or []) for n in nodes if n in hostvars
    }
    return cluster.gates_for_run(gates, restarts)


def _looped(result: Mapping[str, Any]) -> dict[str, Any]:
    """The loop item of one registered loop result (its loop_var)."""
    return dict(result.get(result.get("ansible_loop_var") or "item") or {})


def acceldeploy_gate_pings(results: Any, hostvars: Any, result_var: str) -> list[dict[str, Any]]:
    """The gate's local results | acceldeploy_gate_pings(hostvars, their variable): for each
    Ascend gate that ran here, {gate, peer_npus: {peer: {NPU index: address}}}, the addresses
    read from the peers' results of the same service."""
    peer_results = {
        node: _results(hostvars, node, result_var)
        for result in plain(list(results))
        for node in _looped(result).get("units_by_node", {})
    }
    pings = []
    for result in plain(list(results)):
        gate = _looped(result)
        if not result.get("gated") or not gate.get("npus"):
            continue
        peer_npus = {
            node: other.get("npu_addresses") or {}
            for node in gate["units_by_node"]
            if node != gate["host"]
            for other in peer_results.get(node, [])
            if _looped(other).get("service") == gate["service"]
        }
        pings.append({"gate": gate, "peer_npus": peer_npus})
    return pings


def acceldeploy_gate_refused(results: Any, hostvars: Any, result_vars: list[str]) -> list[str]:
    """The gate's local results | acceldeploy_gate_refused(hostvars, the gate's variables):
    the nodes of the groups gated here whose gate failed, read from each node's registered
    results (a refused node may still be in its rescue while this one goes on)."""
    gated = [_looped(r) for r in plain(list(results)) if r.get("gated")]
    refused: list[str] = []
    for gate in gated:
        for node in gate["units_by_node"]:
            for var in result_vars:
                theirs = _results(hostvars, node, var)
                if node not in refused and any(
                    r.get("failed") and _service_of(r) == gate["service"] for r in theirs
                ):
                    refused.append(node)
    return refused


def _results(hostvars: Any, node: str, var: str) -> list[dict[str, Any]]:
    """A node's registered loop results of `var` ([] when it has none)."""
    if node not in hostvars:
        return []
    return list(plain((hostvars[node].get(var) or {}).get("results", [])))


def _service_of(result: Mapping[str, Any]) -> str:
    item = _looped(result)
    return str(item.get("service") or (item.get("gate") or {}).get("service") or "")


def acceldeploy_unknown_variables(names: list[str]) -> list[str]:
    """Variable names -> a message for each of ours that no role declares (closest name)."""
    return varcheck.unknown_variables(REPO / "roles", names)


def acceldeploy_type_errors(values: Mapping[str, Any]) -> list[str]:
    """{variable: value} -> a message for each value that does not fit its argument spec or
    holds credentials in a URL; a credential's value is masked in every message."""
    given = plain(dict(values))
    secrets.remember(*(str(v) for k, v in given.items() if secrets.is_credential_name(k) and v))
    errors = varcheck.type_errors(REPO / "roles", given) + secrets.url_credential_errors(given)
    return [secrets.mask(message) for message in errors]


def acceldeploy_variable_pattern(_: Any = None) -> str:
    """The regex of our variable names, for query('ansible.builtin.varnames', ...)."""
    return "^(" + "|".join(varcheck.PREFIXES) + ")"


def acceldeploy_serving_pattern(
    inventory_groups: Mapping[str, Any], hostvars: Mapping[str, Any] | None = None
) -> str:
    """groups | acceldeploy_serving_pattern(hostvars): the host pattern of every host that
    serves models (all but the gateways and monitors that do not serve as well), for the play
    that computes acceldeploy_serving."""
    found, known = plain(dict(inventory_groups)), hostvars or {}
    named = sorted({h for g in groups.NOT_SERVING for h in found.get(g) or [] if h in known})
    return groups.serving_pattern(found, acceldeploy_serving_hosts(named, known))


def acceldeploy_serving_hosts(hosts: Any, hostvars: Mapping[str, Any]) -> list[str]:
    """groups['all'] | acceldeploy_serving_hosts(hostvars): the hosts that serve models."""
    return [str(h) for h in hosts if groups.serves(hostvars[h])]


def acceldeploy_run_pattern(inventory_groups: Mapping[str, Any]) -> str:
    """groups | acceldeploy_run_pattern: every host of the run (preflight's first play)."""
    return groups.run_pattern(plain(dict(inventory_groups)))


def acceldeploy_runtime_role(platform: Any, run_tags: Any = ("all",), skip_tags: Any = ()) -> str:
    """acceldeploy_platform | acceldeploy_runtime_role: the role that gates the platform's
    runtime (its class's runtime_role: ascend_runtime, gaudi_runtime), "" for none (cpu, or no
    platform set). With (ansible_run_tags, ansible_skip_tags), "" too when the run's tags leave
    the role out, as they would a play tagged with its name (playbooks/runtime.yml)."""
    role = (for_name(str(platform)).runtime_role or "") if platform else ""
    return role if drift.play_runs([role], list(run_tags), list(skip_tags)) else ""


def acceldeploy_serves(group_names: Any, also_serves: Any = False) -> bool:
    """group_names | acceldeploy_serves(acceldeploy_serves | default(false)): the host serves
    models (no gateway, no monitor, or one that serves as well)."""
    return groups.serves(
        {"group_names": plain(list(group_names or [])), groups.SERVES_VAR: also_serves}
    )


def acceldeploy_target_probe(inputs: Mapping[str, Any]) -> str:
    """Preflight's first contact: the read-only shell probe for every interpreter in use and
    the runtime's version files and tools (the stack lock)."""
    return stacklock.probe_script(plain(dict(inputs)))


def acceldeploy_target(stdout: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The probe's output -> the host's target facts and its stack lock, with every refusal
    naming the fix."""
    return stacklock.check(str(stdout), plain(dict(inputs)))


@cache
def _code_digest() -> str:
    if not (REPO / "roles").is_dir():  # a digest of nothing would never change
        raise AcceldeployError(f"no roles/ in {REPO}: acceldeploy's code digest needs them")
    return drift.code_digest(str(REPO), str(Path(acceldeploy.__file__).parent))


def acceldeploy_state_key(inputs: Any) -> str:
    """A role's inputs -> the key its no-op record is kept under (drift.py): another input,
    or another acceldeploy, and the role runs in full once."""
    return drift.state_key(plain(inputs), _code_digest())


def acceldeploy_whole_run(run_tags: Any, skip_tags: Any, check_mode: Any) -> bool:
    """ansible_run_tags | acceldeploy_whole_run(ansible_skip_tags, ansible_check_mode): whether
    this run may record its converge for the no-op path."""
    return drift.whole_run(list(run_tags), list(skip_tags), bool(check_mode))


def acceldeploy_verify_follows(run_tags: Any, skip_tags: Any, check_mode: Any) -> bool:
    """ansible_run_tags | acceldeploy_verify_follows(ansible_skip_tags, ansible_check_mode):
    whether site.yml's verify play (tagged verify, not run in check mode) will check every
    service later in this run, so serve's no-op path need not."""
    return not bool(check_mode) and drift.play_runs(["verify"], list(run_tags), list(skip_tags))


def acceldeploy_verify_stack_args(hostvars: Any, hosts: Any) -> list[str]:
    """hostvars | acceldeploy_verify_stack_args(ansible_play_hosts): verify's ``--stack
    HOST=STACK`` for each host whose acceldeploy_stack is set (from the inventory or -e), so
    verify checks the stack this run deployed."""
    args: list[str] = []
    for host in hosts:
        stack = hostvars[host].get("acceldeploy_stack")
        if stack:
            args += ["--stack", f"{host}={stack}"]
    return args


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(
            acceldeploy_plan_var_names,
            acceldeploy_runtime_role,
            acceldeploy_host_units,
            acceldeploy_node_ips,
            acceldeploy_host_addresses,
            acceldeploy_node_view,
            acceldeploy_group_errors,
            acceldeploy_rollout,
            acceldeploy_gates_for_run,
            acceldeploy_gate_pings,
            acceldeploy_gate_refused,
            acceldeploy_unknown_variables,
            acceldeploy_type_errors,
            acceldeploy_variable_pattern,
            acceldeploy_serving_pattern,
            acceldeploy_run_pattern,
            acceldeploy_serves,
            acceldeploy_serving_hosts,
            acceldeploy_target_probe,
            acceldeploy_target,
            acceldeploy_state_key,
            acceldeploy_whole_run,
            acceldeploy_verify_follows,
            acceldeploy_verify_stack_args,
        )
