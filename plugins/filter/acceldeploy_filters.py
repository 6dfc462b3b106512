"""Ansible adapter over tools/acceldeploy (installed in the controller's venv by pyproject):
one host plan shared by preflight, the roles, verify and `plan.py render`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acceldeploy.host.state import drift
from acceldeploy.inventory import groups
from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.platforms import for_name
from acceldeploy.serving import cluster

# The collection's root (this repository, or where ansible-galaxy installed it): the roles,
# plugins and playbooks whose digest is part of every no-op key, the roles whose variables an
# inventory may set.
REPO = Path(__file__).resolve().parents[2]


def acceldeploy_rollout(
    hosts: list[str], views: Mapping[str, Any], serial: Any, idle: Any = ()
) -> dict[str, Any]:
    """ansible_play_hosts | acceldeploy_rollout({host: node view}, vllm_service_serial,
    [hosts serving nothing now]): the serve play's batches, a multi-node group always in one
    batch, the idle hosts together first (cluster.rollout)."""
    return cluster.rollout(
        [str(h) for h in hosts], plain(dict(views)), plain(serial), {str(h) for h in idle}
    )


def _looped(result: Mapping[str, Any]) -> dict[str, Any]:
    """The loop item of one registered loop result (its loop_var)."""
    return dict(result.get(result.get("ansible_loop_var") or "item") or {})


def acceldeploy_gate_pings(results: Any, hostvars: Any, result_var: str) -> list[dict[str, Any]]:
    """The gate's local results | acceldeploy_gate_pings(hostvars, their variable): for each
    Ascend check that ran here, {gate, peer_npus: {peer: {NPU index: address}}}, the addresses
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


def acceldeploy_serving_pattern(
    inventory_groups: Mapping[str, Any], hostvars: Mapping[str, Any] | None = None
) -> str:
    """groups | acceldeploy_serving_pattern(hostvars): the host pattern of every host that
    serves models (all but the gateways and monitors that do not serve as well), for the play
    that computes acceldeploy_serving."""
    found, known = plain(dict(inventory_groups)), hostvars or {}
    named = sorted({h for g in groups.NOT_SERVING for h in found.get(g) or [] if h in known})
    return groups.serving_pattern(found, [h for h in named if groups.serves(known[h])])


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
            acceldeploy_runtime_role,
            acceldeploy_rollout,
            acceldeploy_gate_pings,
            acceldeploy_gate_refused,
            acceldeploy_serving_pattern,
            acceldeploy_run_pattern,
            acceldeploy_serves,
            acceldeploy_verify_follows,
            acceldeploy_verify_stack_args,
        )
