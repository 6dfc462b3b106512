"""The roles' documented defaults, for the tools that read an inventory without Ansible.

`tools/verify.py` and `plan.py` see only the inventory's variables; a variable the inventory
leaves unset has the value in its role's defaults/main.yml, read from there (not copied).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from acceldeploy.errors import AcceldeployError

ROLES_DIR = Path(__file__).resolve().parents[3] / "roles"
ROLES = ("host_tuning", "python_env", "model_weights", "vllm_service", "ascend_runtime",
         "gaudi_runtime", "gateway", "monitor")  # fmt: skip


@cache
def role_defaults(role: str) -> dict[str, Any]:
    data = yaml.safe_load((ROLES_DIR / role / "defaults" / "main.yml").read_text())
    return dict(data or {})


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
