"""Run a role's contract (tools/acceldeploy/roles/) as the role's task sees its variables: its
day-2 numbers against their bounds (tools/acceldeploy/inventory/bounds.py), then its plan.
Returns the plan's facts as `facts` (the role's next task sets them); fails naming each
variable out of its bounds, or the variable a bad input is in and the fix. Read-only, on the
controller; preflight's one pass runs the same contracts for every host of the run.

    - acceldeploy.fleet.acceldeploy_contract:
        role: python_env
      register: python_env_contract

`part: job` runs a later part of a role's plan (model_weights, once the fan-out is known),
without the bounds, which the role's own plan checked.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from acceldeploy import roles, secrets
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import bounds
from acceldeploy.inventory.ansible_adapter import error_message, task_scope


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        role = str(self._task.args.get("role") or "")
        part = str(self._task.args.get("part") or "")
        scope = task_scope(task_vars or {}, self._templar)
        try:
            errors = [] if part else bounds.role_errors(role, scope.__getitem__)
            facts = {} if errors else roles.plan(role, scope, part)
        except (AcceldeployError, AnsibleError) as exc:  # AnsibleError: a variable's template
            errors, facts = [error_message(exc)], {}
        result.update(changed=False, facts=facts)
        if errors:
            result.update(failed=True, msg=secrets.mask("; ".join(errors)))
        else:
            result["msg"] = f"{role}{'/' + part if part else ''}: planned {', '.join(facts)}"
        return result
