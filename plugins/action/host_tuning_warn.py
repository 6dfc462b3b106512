"""Show messages as Ansible warnings (the BIOS audit's deviations); changes nothing."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        messages = [str(m) for m in self._task.args.get("msgs") or []]
        result.update(changed=False, warnings=messages, msg=f"{len(messages)} warning(s)")
        return result
