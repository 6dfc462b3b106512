"""The inventory's own variables, checked before any role runs: a variable with one of our
prefixes that nothing declares is refused with the closest real name, and a value that does
not fit its argument spec (type, list elements, choices) is refused in plain words. What is
declared: every role's meta/argument_specs.yml (all entry points), its defaults/ and vars/,
and the inventory-wide acceldeploy_* variables below. The roles are the ones the run plays:
the collection's filter plugin passes its own roles/."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from acceldeploy import secrets
from acceldeploy.inventory.roledefaults import ROLES

PREFIXES = ("acceldeploy_", *(f"{role}_" for role in ROLES))
# Inventory-wide variables no single role owns, with their argument spec.
INVENTORY_VARS: dict[str, dict[str, Any]] = {
    "acceldeploy_platform": {"type": "str"},
    # The serving stack of versions/stacks.yml the host runs; unset: the platform's default.
    "acceldeploy_stack": {"type": "str"},
    "acceldeploy_services": {"type": "list"},
    "acceldeploy_models_root": {"type": "path"},
    "acceldeploy_service_user": {"type": "str"},
    # Preflight: try a release data/targets.yml does not list (the minimums still apply).
    "acceldeploy_allow_untested_os": {"type": "bool"},
    # Download nothing on the controller; a missing artefact stops preflight naming it.
    "acceldeploy_offline": {"type": "bool"},
    # An offline bundle (acceldeploy bundle build) the run deploys from, served by the
    # controller on one address of the hosts' network and a port, for the run only.
    "acceldeploy_bundle": {"type": "path"},
    "acceldeploy_bundle_listen": {"type": "str"},
    "acceldeploy_bundle_port": {"type": "int"},
    # What a bundle is built for, per host: its release (<id>-<version> of data/targets.yml)
    # and architecture (bundle/hostclass.py).
    "acceldeploy_os": {"type": "str"},
    "acceldeploy_arch": {"type": "str", "choices": ["x86_64", "aarch64"]},
    # Ignore the no-op records (acceldeploy.host.state.drift): every role checks everything.
    "acceldeploy_full_check": {"type": "bool"},
    # A node of a multi-node service: its address on the network the nodes share
    # (serving/cluster.py).
    "acceldeploy_node_ip": {"type": "str"},
    # A gateway or monitor host that serves models as well (acceldeploy.inventory.groups):
    # read as Python, where the string "yes" would be silently false.
    "acceldeploy_serves": {"type": "yaml_bool"},
    # serve: a failed host also rolls back the hosts an earlier batch of the run switched.
    "acceldeploy_rollback_all": {"type": "bool"},
    # tools/bench.py and tools/tune.py: the inventory's own bench profiles (bench/profiles.py
    # checks each field); site.yml must accept an inventory that has them.
    "acceldeploy_bench_profiles": {"type": "dict"},
}


def _keys(file: Path) -> set[str]:
    if not file.is_file():
        return set()
    return set(yaml.safe_load(file.read_text()) or {})


@cache
def specs(roles_dir: Path) -> dict[str, dict[str, Any]]:
    """Every role variable's argument spec (the first entry point that declares it)."""
    found: dict[str, dict[str, Any]] = {k: dict(v) for k, v in INVENTORY_VARS.items()}
    for role in ROLES:
        data = yaml.safe_load((roles_dir / role / "meta/argument_specs.yml").read_text())
        for entry in data["argument_specs"].values():
            for name, spec in (entry.get("options") or {}).items():
                found.setdefault(str(name), dict(spec or {}))
    return found


@cache
def declared(roles_dir: Path) -> frozenset[str]:
    names = set(INVENTORY_VARS) | set(specs(roles_dir))
    for role in ROLES:
        role_dir = roles_dir / role
        names |= _keys(role_dir / "defaults/main.yml") | _keys(role_dir / "vars/main.yml")
    return frozenset(names)


BOOLEAN_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n"}
KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str | int | float) and not isinstance(v, bool)),
    "path": ("a path", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool) or str(v).lower() in BOOLEAN_WORDS),
    "yaml_bool": ("true or false (a YAML boolean, unquoted)", lambda v: isinstance(v, bool)),
    "int": ("a whole number", lambda v: not isinstance(v, bool) and _is(int, v)),
    "float": ("a number", lambda v: not isinstance(v, bool) and _is(float, v)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "dict": ("a mapping (key: value)", lambda v: isinstance(v, dict)),
    "raw": ("anything", lambda v: True),
}


def _is(kind: type, value: Any) -> bool:
    try:
        kind(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, list | dict)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_errors(roles_dir: Path, values: Mapping[str, Any]) -> list[str]:
    """One message per variable whose value does not fit its argument spec's type, elements
    or choices, in plain words (before Ansible's own validation names its internal types)."""
    known = specs(roles_dir)
    messages = []
    for name, value in sorted(values.items()):
        spec = known.get(name)
        if spec is None or value is None:
            continue
        kind = str(spec.get("type", "str"))
        noun, fits = KINDS.get(kind, KINDS["raw"])
        if not fits(value):
            messages.append(f"{name} must be {noun}, got {_shown(value)}")
            continue
        elements = spec.get("elements")
        if kind == "list" and elements in KINDS:
            element_noun, element_fits = KINDS[str(elements)]
            bad = [v for v in value if not element_fits(v)]
            if bad:
                messages.append(f"{name} must be a list of {element_noun}s, got {_shown(bad[0])}")
                continue
        choices = spec.get("choices")
        if choices and value not in choices:
            allowed = ", ".join(map(str, choices))
            messages.append(f"{name} must be one of {allowed}, got {_shown(value)}")
    return messages


def unknown_variables(roles_dir: Path, names: Iterable[str]) -> list[str]:
    """One message per variable with our prefix that nothing declares."""
    known = declared(roles_dir)
    messages = []
    for name in sorted(set(map(str, names))):
        if not name.startswith(PREFIXES) or name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else "; remove it"
        messages.append(f"{name} is not a variable of acceldeploy (no role declares it){hint}")
    return messages


def ours(names: Iterable[str]) -> list[str]:
    """The names among `names` that are ours (a role's prefix, or acceldeploy_)."""
    return [name for name in names if name.startswith(PREFIXES)]


def input_errors(roles_dir: Path, values: Mapping[str, Any]) -> list[str]:
    """{our variable: its value} of one host -> a message for each name no role declares
    (with the closest one), each value that does not fit its argument spec, and each URL with
    credentials in it; a credential's value is masked in every message."""
    secrets.remember(*(str(v) for k, v in values.items() if secrets.is_credential_name(k) and v))
    errors = (
        unknown_variables(roles_dir, values)
        + type_errors(roles_dir, values)
        + secrets.url_credential_errors(values)
    )
    return [secrets.mask(message) for message in errors]
