"""Ansible adapter for roles/vllm_service: units, launchers and checks from tools/acceldeploy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from acceldeploy.ansible_adapter import plain
from acceldeploy.errors import AcceldeployError
from acceldeploy.render import render_host
from acceldeploy.unit import UnitOptions, build


def vllm_service_units(
    platform: str,
    services: list[dict[str, Any]],
    models_root: str = "/models",
    options: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every service of a host as its unit (sections, launcher, paths, argcheck, URLs).
    Bad input (devices or ports used twice, TP vs devices, a model that does not fit) fails
    with the variable to change, before anything is written."""
    hostvars = {
        "acceldeploy_platform": platform,
        "acceldeploy_services": plain(services),
        "acceldeploy_models_root": models_root,
    }
    try:
        opts = UnitOptions.from_vars({"models_root": models_root, **plain(options or {})})
        return [build(launch, opts).to_dict() for launch in render_host(hostvars)]
    except AcceldeployError as exc:
        raise AnsibleFilterError(str(exc)) from None


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
            "vllm_service_units": vllm_service_units,
            "vllm_service_secret_env": vllm_service_secret_env,
            "vllm_service_topology": vllm_service_topology,
            "vllm_service_auth_header": vllm_service_auth_header,
        }
