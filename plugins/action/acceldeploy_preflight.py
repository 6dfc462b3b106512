"""Preflight's one controller-side pass (kubespray's validate_inventory shape): every role's
input checks, for every host of the run, in one call and one process, before any host is
contacted.

Each step below runs a role's contract (tools/acceldeploy/roles/), with the variables a task of
that role sees on that host (its defaults, the inventory, the facts set so far, its vars), as
the role's own acceldeploy_contract task does: a role used alone checks the same inputs the same
way. The pass returns every host's failures at once (each naming the variable and the fix), the
facts the later plays read, per host, and the errors only the whole fleet shows (the nodes of a
multi-node service that disagree). It changes nothing and contacts no host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from acceldeploy import roles, secrets
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import bounds, varcheck
from acceldeploy.inventory import groups as fleet_groups
from acceldeploy.inventory.ansible_adapter import error_message, task_scope
from acceldeploy.inventory.scope import Scope
from acceldeploy.planner import defects
from acceldeploy.planner.stacks import load_stacks
from acceldeploy.platforms import find
from acceldeploy.roles import model_weights
from acceldeploy.serving import hostplan

ROLES = Path(__file__).resolve().parents[2] / "roles"
# What every host's scope takes from the task's own variables (the run's, not the host's).
RUN_VARS = (
    "ansible_play_hosts", "ansible_play_hosts_all", "ansible_play_batch", "ansible_limit",
    "ansible_check_mode", "ansible_diff_mode", "ansible_inventory_sources", "ansible_run_tags",
    "ansible_skip_tags", "ansible_version", "playbook_dir", "omit",
)  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One role's contract on one host: its day-2 numbers against their bounds
    (tools/acceldeploy/inventory/bounds.py), then its plan; `facts` are those of the plan's
    facts that the later stages read."""

    role: str
    facts: tuple[str, ...] = ()
    # A later part of the role's plan (its numbers were checked by the role's own plan).
    part: str = ""
    # A runtime role's: it runs on the hosts whose platform's class names that role.
    runtime: bool = False


SERVING = (
    Step("vllm_service", ("vllm_service_units", "vllm_service_node_view")),
    Step("host_tuning"),
    Step("ascend_runtime", ("ascend_runtime_stack", "ascend_runtime_options"), runtime=True),
    Step("gaudi_runtime", ("gaudi_runtime_stack", "gaudi_runtime_options",
                           "gaudi_runtime_image_ref"), runtime=True),
    Step("python_env", ("python_env_spec",)),
    Step("model_weights", ("model_weights_info",)),
)  # fmt: skip
RUNTIMES = {step.role: step for step in SERVING if step.runtime}


def serving_steps(hostvars: Mapping[str, Any]) -> list[Step]:
    """A serving host's steps: of the runtime roles', only the one its platform's class names
    (none on cpu, nor on an unknown platform, which the other steps refuse naming it)."""
    platform = find(str(hostvars.get("acceldeploy_platform") or ""))
    runtime = RUNTIMES.get(platform.runtime_role or "") if platform else None
    return [step for step in SERVING if not step.runtime or step is runtime]


# After the fleet's fan-out (model_weights_jobs, the same for every host): each host's part.
WEIGHTS_PART = Step("model_weights", ("model_weights_job", "model_weights_busy",
                                      "model_weights_python", "model_weights_hub_python"),
                    part="job")  # fmt: skip
GATEWAY = Step("gateway", ("gateway_plan",))
MONITOR = Step("monitor", ("monitor_metrics", "monitor_file_sd", "monitor_rules",
                           "monitor_dashboards", "monitor_device_exporter"))  # fmt: skip
# Every fact the pass can deliver (playbooks/preflight.yml sets each host's own).
FACTS = tuple(dict.fromkeys(
    [f for step in (*SERVING, WEIGHTS_PART, GATEWAY, MONITOR) for f in step.facts]
    + ["model_weights_jobs"]))  # fmt: skip


def _message(exc: BaseException) -> str:
    """The check's own words, masked."""
    return secrets.mask(error_message(exc))


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        self._hostvars = task_vars["hostvars"]
        self._files: dict[tuple[str, str], dict[str, Any]] = {}
        self._raws: dict[str, dict[str, Any]] = {}
        self._run = {name: task_vars[name] for name in RUN_VARS if name in task_vars}
        self._groups = task_vars.get("groups") or {}
        hosts = [str(h) for h in self._task.args.get("hosts") or []]
        self._errors: dict[str, list[str]] = {}
        self._facts: dict[str, dict[str, Any]] = {h: {} for h in hosts}

        named = [h for h in hosts if self._names_pass(h)]
        serving = [h for h in named if fleet_groups.serves(self._raw(h))]
        for host in serving:
            for step in serving_steps(self._raw(host)):
                self._step(host, step)
        self._weights_fanout([h for h in serving if h not in self._errors], serving)
        for host in named:
            if fleet_groups.in_group(self._raw(host), fleet_groups.GATEWAYS):
                self._step(host, GATEWAY)
            if fleet_groups.in_group(self._raw(host), fleet_groups.MONITORS):
                self._step(host, MONITOR)

        ok = [h for h in serving if h not in self._errors]
        result.update(
            changed=False,
            errors=self._errors,
            facts={h: facts for h, facts in self._facts.items() if h not in self._errors},
            fleet_errors=self._group_errors(ok) if len(ok) == len(serving) else [],
            commands=[
                f"{host}: {unit['name']}: {unit['launch']['command_line']}"
                for host in ok
                for unit in self._facts[host].get("vllm_service_units") or []
            ],
            msg=f"{len(hosts) - len(self._errors)} of {len(hosts)} hosts' inputs passed",
        )
        warnings = self._defect_warnings(ok)
        if warnings:
            result["warnings"] = warnings
        return result

    def _defect_warnings(self, hosts: list[str]) -> list[str]:
        """One line per host whose stack has known defects (a warning, not a refusal)."""
        every, lines = load_stacks(), []
        for host in hosts:
            view = self._facts[host].get("vllm_service_node_view") or {}
            entry = every.get(str(view.get("stack") or ""))
            line = defects.warning(host, entry) if entry else ""
            lines += [line] if line else []
        return lines

    def _role_file(self, role: str, kind: str) -> dict[str, Any]:
        """roles/<role>/<kind>/main.yml as Ansible loads it (its templates trusted)."""
        path = ROLES / role / kind / "main.yml"
        if (role, kind) not in self._files:
            loaded = (
                self._loader.load_from_file(str(path), trusted_as_template=True)
                if path.is_file()
                else {}
            )
            self._files[role, kind] = dict(loaded or {})
        return self._files[role, kind]

    def _raw(self, host: str) -> dict[str, Any]:
        """The host's own variables (the inventory's, the facts set so far), read once."""
        if host not in self._raws:
            self._raws[host] = dict(self._hostvars.raw_get(host))
        return self._raws[host]

    def _scope(self, host: str, role: str) -> dict[str, Any]:
        """The variables a task of `role` sees on `host` (include_role's precedence: role
        defaults, then the inventory and the facts set so far, then role vars)."""
        return {**self._role_file(role, "defaults"), **self._raw(host), **self._facts[host],
                **self._role_file(role, "vars"), **self._run, "hostvars": self._hostvars,
                "inventory_hostname": host, "role_path": str(ROLES / role),
                "role_name": f"acceldeploy.fleet.{role}"}  # fmt: skip

    def _fail(self, host: str, messages: list[str]) -> None:
        known = self._errors.setdefault(host, [])
        known.extend(
            m for m in dict.fromkeys(secrets.mask(str(m)) for m in messages) if m not in known
        )

    def _host_scope(self, host: str, variables: Mapping[str, Any]) -> Scope:
        return task_scope(variables, self._templar, host)

    def _names_pass(self, host: str) -> bool:
        """The inventory's own variables of ours: misspelt names, wrong types."""
        variables = {**self._raw(host), **self._run, "hostvars": self._hostvars}
        scope = self._host_scope(host, variables)
        try:
            errors = varcheck.input_errors(
                ROLES, {name: scope[name] for name in varcheck.ours(variables)}
            )
        except (AnsibleError, AcceldeployError) as exc:
            errors = [_message(exc)]
        if errors:
            self._fail(host, list(errors))
        return not errors

    def _step(self, host: str, step: Step) -> None:
        """One role's contract on one host: its bounds, then its plan (the first failure ends
        the step)."""
        try:
            scope = self._host_scope(host, self._scope(host, step.role))
            failed = [] if step.part else bounds.role_errors(step.role, scope.__getitem__)
            if failed:
                self._fail(host, failed)
                return
            planned = roles.plan(step.role, scope, step.part)
            self._facts[host].update({f: planned[f] for f in step.facts if f in planned})
        except (AnsibleError, AcceldeployError) as exc:
            self._fail(host, [_message(exc)])

    def _weights_fanout(self, ok: list[str], serving: list[str]) -> None:
        """Who downloads from the hub, who pulls from a seed, who only verifies: once for the
        fleet (the serving hosts of the run), then each host's part."""
        if not ok:
            return
        infos = {h: self._facts[h]["model_weights_info"] for h in ok}
        try:
            jobs = model_weights.fanout(
                infos, serving, [str(h) for h in self._groups.get("all") or ()]
            )
        except AcceldeployError as exc:
            for host in ok:
                self._fail(host, [_message(exc)])
            return
        for host in ok:
            self._facts[host]["model_weights_jobs"] = jobs
            self._step(host, WEIGHTS_PART)

    def _group_errors(self, ok: list[str]) -> list[str]:
        """The nodes of every multi-node service agree (platform, stack, model, layout)."""
        views = {h: dict(self._facts[h].get("vllm_service_node_view") or {}) for h in ok}
        keys = {h: str((self._facts[h].get("python_env_spec") or {}).get("key")) for h in ok}
        try:
            return hostplan.group_errors(views, keys)
        except AcceldeployError as exc:
            return [_message(exc)]
