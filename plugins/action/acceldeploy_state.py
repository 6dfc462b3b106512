"""The no-op path's one call per role and host (the acceldeploy_state module, on the host), its
key and what it watches from the role's contract (tools/acceldeploy/roles/<role>.py) on the
controller: `role` gives the key (every input of what the role writes, and this acceldeploy's
code digest: state/drift.py) and, when recording, the role's footprint (the files, trees and
units it owns). A task that names no role passes its own key and footprint. Only a whole, real
run records (no --tags, --skip-tags or --check: drift.whole_run); another skips the record.

    - acceldeploy.fleet.acceldeploy_state:
        path: "{{ python_env_state_file }}"
        role: python_env
        state: record
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

import acceldeploy
from acceldeploy import roles, secrets
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.state import drift
from acceldeploy.inventory.ansible_adapter import error_message, task_scope

MODULE = "acceldeploy.fleet.acceldeploy_state"
# The collection's root (this repository, or where ansible-galaxy installed it): its roles,
# plugins and playbooks are part of every key's code digest.
REPO = Path(__file__).resolve().parents[2]


@cache
def code_digest() -> str:
    if not (REPO / "roles").is_dir():  # a digest of nothing would never change
        raise AcceldeployError(f"no roles/ in {REPO}: acceldeploy's code digest needs them")
    return drift.code_digest(str(REPO), str(Path(acceldeploy.__file__).parent))


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        role = str(args.pop("role", "") or "")
        seen = task_vars or {}
        if args.get("state") == "record" and not drift.whole_run(
            seen.get("ansible_run_tags") or ["all"],
            seen.get("ansible_skip_tags") or [],
            bool(seen.get("ansible_check_mode")),
        ):
            result.update(skipped=True, changed=False,
                          skip_reason="only a whole, real run records its converge")  # fmt: skip
            return result
        if role and args.get("state", "check") != "absent":
            scope = task_scope(task_vars or {}, self._templar)
            try:
                args["key"] = drift.state_key(roles.state_inputs(role, scope), code_digest())
                if args.get("state") == "record":
                    args.update(roles.owned(role, scope))
            except (AcceldeployError, AnsibleError) as exc:
                message = f"{role}'s no-op record: {error_message(exc)}"
                result.update(failed=True, msg=secrets.mask(message))
                return result
        result.update(self._execute_module(MODULE, module_args=args, task_vars=task_vars))
        return result
