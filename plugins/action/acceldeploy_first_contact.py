"""A read-only first contact with a host: one shell probe (no Python needed there, as
`ansible.builtin.raw` runs it), then what the package judges of its output. Runs in check mode
too, since it changes nothing; fails with every refusal, each naming the variable and the fix.

    - acceldeploy.fleet.acceldeploy_first_contact:
        probe: target          # the release, systemd, glibc, the interpreters, the stack lock
        inputs: "{{ preflight_target_inputs }}"
      register: preflight_first_contact   # .found: what the judge returned

    - acceldeploy.fleet.acceldeploy_first_contact:
        probe: certificate     # the PEM HAProxy will load: a certificate and its key
        inputs: "{{ gateway_tls_certificate }}"

The probes' shells and judges live in the package: tools/acceldeploy/runtimes/stacklock.py
(target) and tools/acceldeploy/gateway/certificate.py (certificate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.plugins.action import ActionBase

from acceldeploy.gateway import certificate
from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.runtimes import stacklock

Script = Callable[[Any], str]
# (stdout, inputs, host) -> what was found, its refusals under "errors"
Judge = Callable[[str, Any, str], dict[str, Any]]
PROBES: dict[str, tuple[Script, Judge]] = {
    "target": (stacklock.probe_script, lambda out, inputs, host: stacklock.check(out, inputs)),
    "certificate": (
        lambda path: certificate.probe(str(path)),
        lambda out, path, host: {"errors": certificate.errors(out, str(path), host)},
    ),
}


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        name = str(self._task.args.get("probe") or "")
        if name not in PROBES:
            known = ", ".join(PROBES)
            result.update(failed=True, msg=f"probe must be one of {known}, not {name!r}")
            return result
        script, judge = PROBES[name]
        inputs = plain(self._task.args.get("inputs"))
        ran = self._low_level_execute_command(script(inputs), executable=False)
        result["changed"] = False
        if ran.get("rc", 0) != 0:
            stderr = str(ran.get("stderr") or ran.get("stdout") or "").strip()
            result.update(failed=True, msg=f"the {name} probe failed (rc {ran['rc']}): {stderr}")
            return result
        host = str((task_vars or {}).get("inventory_hostname", ""))
        found = judge(str(ran.get("stdout") or ""), inputs, host)
        result["found"] = found
        if found.get("errors"):
            result.update(failed=True, msg="; ".join(found["errors"]))
        return result
