"""The roles' documented defaults, for the tools that read an inventory without Ansible.

`tools/verify.py` and `plan.py` see only the inventory's variables; a variable the inventory
leaves unset has the value in its role's defaults/main.yml. The package carries them as its
data (data/role-defaults.yml), generated from the roles by
`python -m acceldeploy.docsgen.roledocs --write` and held equal to them by
tests/unit/test_role_docs.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from acceldeploy import data_files
from acceldeploy.errors import AcceldeployError

REFERENCE = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
DEFAULTS = "role-defaults"  # data/role-defaults.yml: {role: its defaults/main.yml}
ROLES = ("host_tuning", "python_env", "model_weights", "vllm_service", "ascend_runtime",
         "gaudi_runtime", "gateway", "monitor")  # fmt: skip


@cache
def role_defaults(role: str) -> dict[str, Any]:
    return dict(data_files.load(DEFAULTS).get(role) or {})


def role_of(variable: str) -> str:
    for role in ROLES:
        if variable.startswith(role + "_"):
            return role
    raise AcceldeployError(f"{variable} belongs to no role of {', '.join(ROLES)}")


def value(hostvars: Mapping[str, Any], variable: str) -> Any:
    """The host's value of a role variable, else the role's default (a literal there)."""
    if variable in hostvars:
        return hostvars[variable]
    default = role_defaults(role_of(variable)).get(variable)
    if isinstance(default, str) and "{{" in default:
        raise AcceldeployError(f"{variable}: its role default is templated; set it explicitly")
    return default


def rendered(hostvars: Mapping[str, Any], variable: str) -> Any:
    """``value``, where a default that only names other role variables (``{{ name }}``, as
    ``ascend_runtime_driver_info``'s ``{{ ascend_runtime_home }}/driver/version.info``) is
    filled in from the host's values of those; lists element by element."""
    if variable in hostvars:
        return hostvars[variable]
    default = role_defaults(role_of(variable)).get(variable)

    def fill(text: Any) -> Any:
        if not isinstance(text, str) or "{{" not in text:
            return text
        filled = REFERENCE.sub(lambda m: str(rendered(hostvars, m.group(1))), text)
        if "{{" in filled:
            raise AcceldeployError(f"{variable}: its role default is templated; set it explicitly")
        return filled

    return [fill(v) for v in default] if isinstance(default, list) else fill(default)
