"""What a role's contract is: its plan (the facts its checks set, from its variables, before any
host is touched), the later parts of that plan, what the no-op path's key covers, and what the
role owns on a host (its footprint: the files, trees and units it writes, which the no-op path
watches)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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


def footprint(contract: Contract, scope: Scope) -> Footprint:
    """The contract's footprint on the scope's host, every kind present ([] for none)."""
    if contract.footprint is None:
        return {kind: [] for kind in FOOTPRINT_KINDS}
    owned = contract.footprint(scope)
    return {kind: [str(item) for item in owned.get(kind) or []] for kind in FOOTPRINT_KINDS}
