"""Checks of each gateway host: HAProxy's own view of every server it should send to (UP, or
named with its host and state), then a real chat completion through each frontend."""

from __future__ import annotations

import csv
import io
import shlex
from collections.abc import Mapping
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway import plan
from acceldeploy.inventory import roledefaults
from acceldeploy.serving.service import on_host
from acceldeploy.verify import api
from acceldeploy.verify.model import Check
from acceldeploy.verify.remote import forward, reach

# A command on HAProxy's runtime API (argv: socket, command), with the Python every Ansible
# host has; its answer on stdout.
RUNTIME_API = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_UNIX)\n"
    "s.settimeout(10)\n"
    "s.connect(sys.argv[1])\n"
    "s.sendall(sys.argv[2].encode()+b'\\n')\n"
    "d=b''.join(iter(lambda:s.recv(65536),b''))\n"
    "sys.stdout.write(d.decode())\n"
)


def runtime_api_command(socket_path: str, command: str) -> str:
    return shlex.join(["python3", "-c", RUNTIME_API, socket_path, command])


def server_states(stat_csv: str) -> dict[tuple[str, str], dict[str, str]]:
    """(backend, server) -> its `show stat` row (status UP, DOWN, DRAIN, MAINT, ...)."""
    text = stat_csv.lstrip("# ")
    rows = csv.DictReader(io.StringIO(text))
    return {
        (row["pxname"], row["svname"]): row
        for row in rows
        if row.get("svname") not in ("FRONTEND", "BACKEND", None)
    }


def _server_checks(
    gateway: str, frontends: list[plan.Frontend], states: Mapping[tuple[str, str], Any]
) -> list[Check]:
    checks = []
    for frontend in frontends:
        for server in frontend.servers:
            row = states.get((frontend.service, server.host))
            status = (row or {}).get("status", "absent")
            where = f"{server.host} ({server.address}:{server.port})"
            ok = status == "UP"
            fix = (
                f"HAProxy on {gateway} sees {server.host} {status}: on {server.host}, "
                f"systemctl status {frontend.service}; a drained server comes back with "
                f"`set server {frontend.service}/{server.host} state ready` on the runtime API"
            )
            checks.append(Check(gateway, f"backend {server.host}",
                                "pass" if ok else "fail", f"{where}: {status}",
                                "" if ok else fix, frontend.service))  # fmt: skip
    return checks


def check_gateway(
    hostname: str,
    hostvars: Mapping[str, Any],
    every: Mapping[str, Mapping[str, Any]],
    timeout: float,
) -> list[Check]:
    try:
        serving, gateways = plan.fleet_views(every)
        frontends = plan.plan(
            hostvars.get("gateway_frontends"), serving, gateways, plan.settings(hostvars)
        )
        socket_path = str(roledefaults.value(hostvars, "gateway_stats_socket"))
        keys = list(roledefaults.value(hostvars, "gateway_client_keys") or [])
        tls = bool(roledefaults.value(hostvars, "gateway_tls_certificate"))
    except AcceldeployError as exc:
        return [Check(hostname, "inventory", "fail", str(exc), "fix the inventory")]
    conn, reached = reach(hostname, dict(hostvars), timeout)
    checks = [reached]
    if conn is None:
        return checks
    try:
        command = runtime_api_command(socket_path, "show stat")
        result = conn.run(command, hide=True, warn=True, timeout=timeout)
        if result.exited != 0:
            return [*checks, Check(hostname, "haproxy", "fail",
                                   f"runtime API {socket_path}: {result.stderr.strip()[-300:]}",
                                   f"systemctl status haproxy on {hostname}")]  # fmt: skip
        checks += _server_checks(hostname, frontends, server_states(result.stdout))
        for frontend in frontends:
            with forward(conn, on_host(frontend.bind), frontend.port) as base:
                target = api.Target(host=hostname, service=frontend.service,
                                    base=base.replace("http://", "https://") if tls else base,
                                    expect_version="", multimodal=False, dev_mode=False,
                                    api_key=keys[0] if keys else None, timeout=timeout,
                                    tls=tls)  # fmt: skip
                checks.append(api.chat(target, "gateway chat", "Say hello."))
    finally:
        conn.close()
    return checks
