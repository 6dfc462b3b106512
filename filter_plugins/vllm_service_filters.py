"""Ansible adapter for roles/vllm_service: secrets and topology (the units themselves come
from acceldeploy_host_units, the host plan)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any

from ansible.errors import AnsibleFilterError


def vllm_service_secret_env(services: list[dict[str, Any]], name: str) -> str:
    """The 0600 EnvironmentFile of a service: VLLM_API_KEY=<its api_key> (use under no_log)."""
    for service in services:
        if service.get("name") == name and service.get("api_key"):
            key = str(service["api_key"])
            if "\n" in key:
                raise AnsibleFilterError(f"service {name}: api_key cannot contain a newline")
            return f"VLLM_API_KEY={key}\n"
    return ""


def vllm_service_auth_header(services: list[dict[str, Any]], name: str) -> dict[str, str]:
    """{Authorization: Bearer <api_key>} for the gate when the service has a key (no_log)."""
    for service in services:
        if service.get("name") == name and service.get("api_key"):
            return {"Authorization": f"Bearer {service['api_key']}"}
    return {}


def vllm_service_topology(gaudi_fact: dict[str, Any] | None) -> list[dict[str, Any]]:
    """gaudi_runtime's recorded modules [{module_id, numa, cpus}] as [{device, numa, cpus}]."""
    modules = (gaudi_fact or {}).get("modules") or []
    return [
        {"device": m["module_id"], "numa": m.get("numa"), "cpus": m.get("cpus")}
        for m in modules
        if m.get("module_id") is not None
    ]


def vllm_service_argcheck_digest(argcheck: list[str] | None, env_key: str = "") -> str:
    """What a parser check is of: the exact argv vLLM's parser gets and the environment's key
    (python_env's: a rebuilt env is another parser). Recorded once the gate passed; an equal
    digest on the next run means this argv already passed this parser."""
    text = json.dumps([list(argcheck or []), str(env_key or "")])
    return hashlib.sha256(text.encode()).hexdigest()


def vllm_service_argcheck_passed(recorded: list[dict[str, Any]], env_key: str = "") -> list[str]:
    """The services whose recorded digest (slurp results looped over the units) matches their
    argv and env key now: their parser check already passed."""
    passed = []
    for result in recorded:
        unit = result.get("vllm_service_unit") or {}
        content = result.get("content")
        if not content or not unit.get("argcheck"):
            continue
        digest = base64.b64decode(content).decode(errors="replace").strip()
        if digest == vllm_service_argcheck_digest(unit["argcheck"], env_key):
            passed.append(str(unit["name"]))
    return passed


def vllm_service_secrets_digest(services: list[dict[str, Any]], names: list[str]) -> str:
    """sha256 of the named services' secrets files: part of the no-op path's key without the
    key itself appearing anywhere."""
    text = json.dumps([vllm_service_secret_env(services, name) for name in names])
    return hashlib.sha256(text.encode()).hexdigest()


def vllm_service_state_spec(
    units: list[dict[str, Any]], helpers: list[str], dirs: dict[str, str]
) -> dict[str, list[str]]:
    """What the no-op path compares with the last converge (tools/acceldeploy/drift.py): every
    file the role writes (units, launchers, secrets, helpers, the rollback point), the service
    user's entries, and each unit's state (active, enabled)."""
    files = [f"{dirs['launcher']}/{helper}" for helper in helpers] + ["/etc/passwd", "/etc/group"]
    for unit in units:
        name = str(unit["name"])
        files += [unit["unit_path"], unit["launcher_path"], f"{dirs['secret']}/{name}.env"]
        kept = (os.path.basename(unit[path]) for path in ("unit_path", "launcher_path"))
        files += [f"{dirs['last_good']}/{base}" for base in kept]
        if unit.get("argcheck"):
            files.append(f"{dirs['last_good']}/{name}.argcheck")
    return {"files": [str(f) for f in files], "units": [f"{u['name']}.service" for u in units]}


def vllm_service_rollback_files(last_good: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The stat results of the last good units (looped over the units) -> the files to put
    back: each such service's unit (0644) and launcher (0755)."""
    files = []
    for result in last_good:
        unit = result.get("vllm_service_unit") or {}
        if (result.get("stat") or {}).get("exists"):
            files += [{"path": unit["unit_path"], "mode": "0644"},
                      {"path": unit["launcher_path"], "mode": "0755"}]  # fmt: skip
    return files


def vllm_service_failure_report(
    host: str,
    failure: dict[str, Any],
    health: list[dict[str, Any]],
    stopped: list[dict[str, Any]],
    switched: list[str],
    rollback: bool,
) -> str:
    """Why the rollout stopped on this host and what the rollback did: the cause, the journal
    lines that show it, the services back on their last good set (serving again or not), the
    new ones stopped, and the hosts an earlier batch already switched."""
    lines = [f"{failure.get('cause', 'failed')}. The rollout stops here; hosts after "
             f"{host} are untouched."]  # fmt: skip
    back = [r["vllm_service_unit"]["name"] for r in health if r.get("status") == 200]
    down = [r["vllm_service_unit"]["name"] for r in health if r.get("status") != 200]
    new = [str(r["vllm_service_rollback_name"]) for r in stopped]
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
    others = [h for h in switched if h != host]
    if others:
        lines.append(f"Already switched by this run and serving the new units: "
                     f"{', '.join(others)} (left as they are).")  # fmt: skip
    journal = [str(line) for line in failure.get("journal") or []]
    if journal:
        lines.append("Journal: " + " | ".join(journal[-12:]))
    return " ".join(lines)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_service_secret_env": vllm_service_secret_env,
            "vllm_service_topology": vllm_service_topology,
            "vllm_service_auth_header": vllm_service_auth_header,
            "vllm_service_argcheck_digest": vllm_service_argcheck_digest,
            "vllm_service_argcheck_passed": vllm_service_argcheck_passed,
            "vllm_service_secrets_digest": vllm_service_secrets_digest,
            "vllm_service_state_spec": vllm_service_state_spec,
            "vllm_service_rollback_files": vllm_service_rollback_files,
            "vllm_service_failure_report": vllm_service_failure_report,
        }
