"""Each role's contract, in Python, one module per role (contract.py says what a contract is):
what the role plans from its variables before any host is touched, what the no-op path's key
covers, and what the role owns on a host. One action runs a contract inside its role
(plugins/action/acceldeploy_contract.py), preflight's one pass runs the same contracts for every
host of the run (plugins/action/acceldeploy_preflight.py), and the no-op path's one call per
role (plugins/action/acceldeploy_state.py) reads its key and footprint. A role's day-2 numbers
are bounded in tools/acceldeploy/inventory/bounds.py, checked first by the contract's action."""

from __future__ import annotations

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import listeners
from acceldeploy.inventory.listeners import Listener
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles import (
    ascend_runtime,
    gateway,
    gaudi_runtime,
    host_tuning,
    model_weights,
    monitor,
    python_env,
    vllm_service,
)
from acceldeploy.roles.contract import FOOTPRINT_KINDS, Contract, Facts, Footprint, footprint
from acceldeploy.roles.contract import leaves as role_leaves

CONTRACTS: dict[str, Contract] = {
    module.CONTRACT.role: module.CONTRACT
    for module in (vllm_service, host_tuning, ascend_runtime, gaudi_runtime, python_env,
                   model_weights, gateway, monitor)
}  # fmt: skip


def contract(role: str) -> Contract:
    try:
        return CONTRACTS[role]
    except KeyError:
        raise AcceldeployError(
            f"no contract for role {role!r}; known: {', '.join(CONTRACTS)}"
        ) from None


def has_part(role: str, part: str) -> bool:
    return role in CONTRACTS and (not part or part in CONTRACTS[role].parts)


def plan(role: str, scope: Scope, part: str = "") -> Facts:
    """The facts `role`'s checks set on the scope's host (bad input raises naming the
    variable and the fix); `part`: a later part of its plan."""
    chosen = contract(role)
    if not part:
        facts = chosen.plan(scope)
        for host in chosen.ports_checked(scope) if chosen.ports_checked else []:
            check_ports(scope.at(host))
        return facts
    if part not in chosen.parts:
        raise AcceldeployError(
            f"role {role} has no part {part!r}; known: {', '.join(chosen.parts)}"
        )
    return chosen.parts[part](scope)


def state_inputs(role: str, scope: Scope) -> object:
    """Every input of what `role` writes on the scope's host (the no-op path keys on it)."""
    chosen = contract(role)
    if chosen.state_inputs is None:
        raise AcceldeployError(f"role {role} keeps no no-op record")
    return chosen.state_inputs(scope)


def owned(role: str, scope: Scope) -> Footprint:
    """What `role` owns on the scope's host: its files, trees and units."""
    return footprint(contract(role), scope)


def host_listeners(scope: Scope) -> list[Listener]:
    """Everything that listens on the scope's host: sshd, then each role's listeners, in the
    order of CONTRACTS (the services, HAProxy, Prometheus and the exporters)."""
    found = listeners.ssh(scope.of(scope.host))
    for chosen in CONTRACTS.values():
        found += chosen.listeners(scope) if chosen.listeners else []
    return found


def check_ports(scope: Scope) -> None:
    """The one check of a host's ports: no two of its listeners on one port (the later one is
    refused, naming both variables)."""
    listeners.check(host_listeners(scope), scope.host)


def host_leaves(scope: Scope) -> Footprint:
    """What every role leaves on the scope's serving host beyond its services' own files: what
    a whole host's removal takes (playbooks/remove.yml)."""
    every = [role_leaves(chosen, scope) for chosen in CONTRACTS.values()]
    return {kind: [item for part in every for item in part[kind]] for kind in FOOTPRINT_KINDS}


__all__ = ["CONTRACTS", "Contract", "Scope", "check_ports", "contract", "has_part",
           "host_leaves", "host_listeners", "owned", "plan", "state_inputs"]  # fmt: skip
