"""A role's day-2 numbers (timeouts, retries, counts, keeps, ports) against their bounds
(tools/acceldeploy/inventory/bounds.py), as the task sees them: fails naming each variable out
of its bounds and the range. Read-only, on the controller; preflight's one pass checks the same
through acceldeploy.inventory.bounds.role_errors.

    - acceldeploy.fleet.acceldeploy_bounds:
        role: python_env
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import bounds
from acceldeploy.inventory.ansible_adapter import plain


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        role = str(self._task.args.get("role") or "")
        templar = self._templar.copy_with_new_env(available_variables=task_vars or {})

        def value_of(name: str) -> Any:
            return plain(templar.template(trust_as_template("{{ " + name + " }}")))

        try:
            errors = bounds.role_errors(role, value_of)
        except AcceldeployError as exc:
            errors = [str(exc)]
        checked = len(bounds.names(role))
        result.update(changed=False, checked=checked)
        if errors:
            result.update(failed=True, msg="; ".join(errors))
        else:
            result["msg"] = f"{checked} of {role}'s numbers within their bounds"
        return result
