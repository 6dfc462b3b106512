"""Ansible adapter for roles/vllm_service: secrets and topology (the units themselves come
from acceldeploy_host_units, the host plan)."""

from __future__ import annotations

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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_service_secret_env": vllm_service_secret_env,
            "vllm_service_topology": vllm_service_topology,
            "vllm_service_auth_header": vllm_service_auth_header,
        }
