"""Misspelt variables: any variable with one of our prefixes that nothing declares is refused,
with the closest real name. What is declared: every role's meta/argument_specs.yml (all entry
points), its defaults/ and vars/, and the inventory-wide acceldeploy_* variables below."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from functools import cache

import yaml

from acceldeploy.roledefaults import ROLES, ROLES_DIR

PREFIXES = ("acceldeploy_", *(f"{role}_" for role in ROLES))
# Inventory-wide variables no single role owns.
INVENTORY_VARS = (
    "acceldeploy_platform",
    "acceldeploy_services",
    "acceldeploy_models_root",
    "acceldeploy_service_user",
)


def _keys(path: str) -> set[str]:
    file = ROLES_DIR / path
    if not file.is_file():
        return set()
    return set(yaml.safe_load(file.read_text()) or {})


@cache
def declared() -> frozenset[str]:
    names = set(INVENTORY_VARS)
    for role in ROLES:
        specs = yaml.safe_load((ROLES_DIR / role / "meta/argument_specs.yml").read_text())
        for entry in specs["argument_specs"].values():
            names.update(entry.get("options") or {})
        names |= _keys(f"{role}/defaults/main.yml") | _keys(f"{role}/vars/main.yml")
    return frozenset(names)


def unknown_variables(names: Iterable[str]) -> list[str]:
    """One message per variable with our prefix that nothing declares."""
    known = declared()
    messages = []
    for name in sorted(set(map(str, names))):
        if not name.startswith(PREFIXES) or name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else "; remove it"
        messages.append(f"{name} is not a variable of acceldeploy (no role declares it){hint}")
    return messages
