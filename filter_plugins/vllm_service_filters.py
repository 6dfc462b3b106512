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
        }
