"""Ansible adapter for roles/vllm_service: secrets and topology (the units themselves come
from the role's contract, tools/acceldeploy/roles/vllm_service.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any

from ansible.errors import AnsibleFilterError

from acceldeploy.errors import AcceldeployError
from acceldeploy.host.state import switch
from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.roles import vllm_service
from acceldeploy.serving import crash


def vllm_service_secret_env(services: list[dict[str, Any]], name: str) -> str:
    """The 0600 EnvironmentFile of a service: VLLM_API_KEY=<its api_key> (use under no_log)."""
    try:
        return vllm_service.secret_env(plain(services), str(name))
    except AcceldeployError as exc:
        raise AnsibleFilterError(str(exc)) from None


def vllm_service_auth_header(services: list[dict[str, Any]], name: str) -> dict[str, str]:
    """{Authorization: Bearer <api_key>} for the gate when the service has a key (no_log)."""
    for service in services:
        if service.get("name") == name and service.get("api_key"):
            return {"Authorization": f"Bearer {service['api_key']}"}
    return {}


def vllm_service_argcheck_digest(argcheck: list[str] | None, env_key: str = "") -> str:
    """What a parser check is of: the exact argv vLLM's parser gets and the environment's key
    (python_env's: a rebuilt env is another parser). Recorded once the gate passed; an equal
    digest on the next run means this argv already passed this parser."""
    text = json.dumps([list(argcheck or []), str(env_key or "")])
    return hashlib.sha256(text.encode()).hexdigest()


def vllm_service_argcheck_passed(
    units: list[dict[str, Any]], recorded: dict[str, str], env_key: str = ""
) -> list[str]:
    """units | vllm_service_argcheck_passed({service: its recorded digest as slurp reads it,
    base64, "" when none}, env key): the services whose argv and env key now are what their
    recorded digest is of: their parser check already passed."""
    passed = []
    for unit in units:
        content = recorded.get(str(unit["name"])) or ""
        if not content or not unit.get("argcheck"):
            continue
        digest = base64.b64decode(content).decode(errors="replace").strip()
        if digest == vllm_service_argcheck_digest(unit["argcheck"], env_key):
            passed.append(str(unit["name"]))
    return passed


def vllm_service_rollback_files(restored: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The units that go back to their last good set -> the files to put back: each one's
    unit (0644) and launcher (0755)."""
    files = []
    for unit in restored:
        files += [{"path": unit["unit_path"], "mode": "0644"},
                  {"path": unit["launcher_path"], "mode": "0755"}]  # fmt: skip
    return files


def vllm_service_switch_lines(units: list[dict[str, Any]], launchers: dict[str, str]) -> list[str]:
    """The changed services' units and {service: its launcher as deployed, as slurp reads it,
    base64, "" when none} -> what each would switch (check mode): env build, model revision,
    image, flags."""
    deployed = {
        str(name): base64.b64decode(content).decode(errors="replace")
        for name, content in launchers.items()
        if content
    }
    return [switch.switch_line(u["name"], deployed.get(u["name"]), u["exec_argv"]) for u in units]


def vllm_service_set_files(units: list[dict[str, Any]]) -> list[str]:
    """The units -> the names their unit and launcher have in vllm_service_last_good_dir."""
    return [os.path.basename(u[k]) for u in units for k in ("unit_path", "launcher_path")]


def vllm_service_switched_services(switched: list[Any], failed_host: str) -> list[dict[str, Any]]:
    """The hostvars of the hosts an earlier batch switched -> each service that run restarted
    there, with what rolling it back needs."""
    found = []
    for hv in switched:
        if hv["inventory_hostname"] == failed_host:
            continue
        restarted = set(hv.get("vllm_service_restart") or [])
        for unit in hv["vllm_service_units"]:
            if unit["name"] in restarted:
                unit_file, launcher_file = vllm_service_set_files([unit])
                found.append({"host": hv["inventory_hostname"], "name": unit["name"],
                              "unit_path": unit["unit_path"], "unit_file": unit_file,
                              "launcher_path": unit["launcher_path"],
                              "launcher_file": launcher_file,
                              "health_url": unit["health_url"]})  # fmt: skip
    return found


def vllm_service_group_peers(
    units: list[Any], hostvars: Any, failed_host: str
) -> list[dict[str, Any]]:
    """vllm_service_units | vllm_service_group_peers(hostvars, inventory_hostname): the units of
    this host's multi-node groups that the group's other nodes restarted in this run (a group
    rolls back as one), with what putting them back needs."""
    wanted: dict[str, set[str]] = {}
    for unit in units:
        for node, names in ((unit.get("readiness") or {}).get("units_by_node") or {}).items():
            if node != failed_host:
                wanted.setdefault(node, set()).update(names)
    peers = [hostvars[node] for node in wanted if node in hostvars]
    return [
        service
        for service in vllm_service_switched_services(peers, failed_host)
        if service["name"] in wanted[service["host"]]
    ]


def group_back_line(peers: list[Any]) -> str:
    """The group's part of the report, from [peer unit, what putting it back said]."""
    parts = []
    for service, said in peers:
        where = f"{service['host']}: {service['name']}"
        if "stopped" in str(said or ""):
            parts.append(f"{where} stopped (new in this run)")
        elif "restored" in str(said or ""):
            parts.append(f"{where} restarted on its last good unit and launcher")
        else:
            parts.append(f"ROLLBACK FAILED {where} (see `journalctl -u {service['name']}` there)")
    return "Its group rolls back as one: " + "; ".join(parts) + "."


def switched_back_line(others: list[Any]) -> str:
    """acceldeploy_rollback_all's part of the report, from [switched service, what putting it
    back said, its /health status after]: per host, the services serving again on what this
    run replaced, the ones that do not, and the new ones stopped."""
    parts = []
    for service, said, status in others:
        where = f"{service['host']}: {service['name']}"
        if "stopped" in str(said or ""):
            parts.append(f"{where} stopped (new in this run)")
        elif status == 200:
            parts.append(f"{where} serves again on what this run replaced")
        else:
            parts.append(f"ROLLBACK FAILED {where} (see `journalctl -u {service['name']}` there)")
    return "Rolled back too (acceldeploy_rollback_all): " + "; ".join(parts) + "."


def vllm_service_failure_report(
    host: str,
    failure: dict[str, Any],
    health: dict[str, Any],
    stopped: list[str],
    switched: list[str],
    rollback: bool,
    others: list[Any] | None = None,
    drained: list[str] | None = None,
    group: list[Any] | None = None,
) -> str:
    """Why the rollout stopped on this host and what the rollback did: the cause, the journal
    lines that show it, the services back on their last good set ({service: its /health
    status after}: serving again or not), the new ones stopped (their names), the hosts an
    earlier batch already switched and, with acceldeploy_rollback_all, what putting those back
    did ([switched service, what it said, its /health status]); and what putting back the
    group's other nodes said ([peer unit, what it said])."""
    journal = [str(line) for line in failure.get("journal") or []]
    died = crash.fatal_error(journal)
    lines = [f"{failure.get('cause', 'failed')}{'; ' + died if died else ''}. The rollout stops "
             f"here; hosts after {host} are untouched."]  # fmt: skip
    back = [str(name) for name, status in health.items() if status == 200]
    down = [str(name) for name, status in health.items() if status != 200]
    new = [str(name) for name in stopped]
    if not rollback:
        lines.append(f"{host} was not rolled back (vllm_service_rollback: false); the last "
                     "good units and launchers are in vllm_service_last_good_dir.")  # fmt: skip
    elif back or down or new:
        if back:
            lines.append(f"Rolled back on {host}: {', '.join(back)} serve again on the last "
                         "good unit and launcher.")  # fmt: skip
        if down:
            lines.append(f"ROLLBACK FAILED on {host}: {', '.join(down)} put back on the last "
                         "good unit and launcher but not answering /health; see "
                         f"`journalctl -u {down[0]}`.")  # fmt: skip
        if new:
            lines.append(f"Stopped on {host} (new in this run, no last good set): "
                         f"{', '.join(new)}.")  # fmt: skip
    else:
        lines.append(f"Nothing on {host} was changed by this run, so nothing was rolled back.")
    if group:
        lines.append(group_back_line(group))
    others_hosts = [h for h in switched if h != host]
    if others:
        lines.append(switched_back_line(others))
    elif others_hosts:
        lines.append(f"Already switched by this run and serving the new units: "
                     f"{', '.join(others_hosts)} (left as they are; "
                     "-e acceldeploy_rollback_all=true rolls them back too).")  # fmt: skip
    if drained:
        lines.append(f"Out of the gateways' rotation (drained, not serving): "
                     f"{', '.join(str(d) for d in drained)} on {host}.")  # fmt: skip
    if journal:
        lines.append("Journal: " + " | ".join(journal[-12:]))
    return " ".join(lines)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_service_secret_env": vllm_service_secret_env,
            "vllm_service_auth_header": vllm_service_auth_header,
            "vllm_service_argcheck_digest": vllm_service_argcheck_digest,
            "vllm_service_argcheck_passed": vllm_service_argcheck_passed,
            "vllm_service_rollback_files": vllm_service_rollback_files,
            "vllm_service_failure_report": vllm_service_failure_report,
            "vllm_service_group_peers": vllm_service_group_peers,
            "vllm_service_set_files": vllm_service_set_files,
            "vllm_service_switch_lines": vllm_service_switch_lines,
            "vllm_service_switched_services": vllm_service_switched_services,
        }
