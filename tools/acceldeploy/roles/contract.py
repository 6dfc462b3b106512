"""What a role's contract is: its plan (the facts its checks set, from its variables, before any
host is touched), the later parts of that plan, what the no-op path's key covers, and what the
role owns on a host (its footprint: the files, trees and units it writes, which the no-op path
watches)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acceldeploy.inventory.listeners import Listener
from acceldeploy.inventory.scope import Scope

Facts = dict[str, Any]
# {files, trees, units}: what the no-op path re-observes (state/drift.py Spec).
Footprint = dict[str, list[str]]
FOOTPRINT_KINDS = ("files", "trees", "units")


@dataclass(frozen=True)
class Contract:
    role: str
    plan: Callable[[Scope], Facts]
    # A part planned later in the run than the role's own plan (model_weights's `job`, once
    # the fleet's fan-out is known), by name.
    parts: Mapping[str, Callable[[Scope], Facts]] = field(default_factory=dict)
    # Every input of what the role writes: another value, and the role runs in full once.
    state_inputs: Callable[[Scope], Any] | None = None
    footprint: Callable[[Scope], Mapping[str, Any]] | None = None
    # What the role leaves on a serving host beyond its services' own files (those go with the
    # service: serving/layout.py): a whole host's removal takes it. {files, trees, units}.
    leaves: Callable[[Scope], Mapping[str, Any]] | None = None
    # What the role opens on the scope's host (each port, its variable, what listens there),
    # read from the host's variables as the inventory gives them; roles.check_ports is the
    # one check of a host's ports, over every role's.
    listeners: Callable[[Scope], list[Listener]] | None = None
    # The hosts whose ports the role's plan checks (roles.plan runs the one check on each): a
    # gateway its own, a monitor every host it scrapes.
    ports_checked: Callable[[Scope], list[str]] | None = None


def footprint(contract: Contract, scope: Scope) -> Footprint:
    """The contract's footprint on the scope's host, every kind present ([] for none)."""
    return _kinds(contract.footprint(scope) if contract.footprint else {})


def leaves(contract: Contract, scope: Scope) -> Footprint:
    """What the contract's role leaves on the scope's serving host, every kind present."""
    return _kinds(contract.leaves(scope) if contract.leaves else {})


def _kinds(owned: Mapping[str, Any]) -> Footprint:
    return {kind: [str(item) for item in owned.get(kind) or []] for kind in FOOTPRINT_KINDS}
