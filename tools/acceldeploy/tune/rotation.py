"""A service out of the gateways' rotation and back, from the controller, for a command that
restarts it by itself (acceldeploy tune): HAProxy's runtime API on each gateway host over SSH,
as the rollout does it through Ansible. Drained, the gateways send it no client request, so
what the command measures is its own load alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.gateway import plan
from acceldeploy.inventory import roledefaults
from acceldeploy.verify.gateway import runtime_api_command
from acceldeploy.verify.remote import connection


def where(every: Mapping[str, Mapping[str, Any]], host: str, service: str) -> list[dict[str, str]]:
    """[{gateway, socket, service}]: every gateway frontend that sends this service's requests
    to this host."""
    views = {
        gateway: {"frontends": hv.get("gateway_frontends") or [],
                  "socket": roledefaults.value(hv, "gateway_stats_socket")}
        for gateway, hv in every.items()
        if plan.is_gateway(hv)
    }  # fmt: skip
    return plan.targets(views, host, [service])


def set_state(
    every: Mapping[str, Mapping[str, Any]],
    entries: list[dict[str, str]],
    host: str,
    state: str,
    timeout: float,
) -> list[str]:
    """`set server <service>/<host> state <state>` on each gateway; what failed, per gateway."""
    failed = []
    for entry in entries:
        gateway, command = entry["gateway"], f"set server {entry['service']}/{host} state {state}"
        try:
            conn = connection(gateway, dict(every[gateway]), timeout)
            try:
                result = conn.run(runtime_api_command(entry["socket"], command), hide=True,
                                  warn=True, timeout=timeout)  # fmt: skip
            finally:
                conn.close()
            said = (result.stdout + result.stderr).strip()
            if result.exited != 0 or said:  # the runtime API answers a good `set` with nothing
                failed.append(f"{gateway}: `{command}`: {said or f'exit {result.exited}'}")
        except Exception as exc:
            failed.append(f"{gateway}: `{command}`: {type(exc).__name__}: {exc}")
    return failed
