"""python_env's fan-out plan: of the hosts that (re)build an environment in a run, those that
build the same one (one rebuild key at one path: one host class) form a group; its first host
builds from the wheels and serves the result, the others pull it from that host (roles/
python_env/tasks/fanout.yml, acceldeploy.host.fetch.envcopy on the hosts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_PORT = 8782


def plan(hosts: Sequence[Mapping[str, Any]], enabled: bool = True) -> dict[str, dict[str, Any]]:
    """host -> {role: build | pull | none, from, address, port, serves}, from each host's
    variables (inventory_hostname, python_env_rebuild, python_env_spec, ansible_host,
    python_env_fanout_port)."""
    result: dict[str, dict[str, Any]] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    info: dict[str, dict[str, Any]] = {}
    for host in hosts:
        name = str(host["inventory_hostname"])
        spec = host.get("python_env_spec") or {}
        info[name] = {
            "address": str(host.get("ansible_host") or name),
            "port": int(host.get("python_env_fanout_port") or DEFAULT_PORT),
        }
        rebuild = str(host.get("python_env_rebuild")).lower() in ("true", "1")
        if not rebuild:
            result[name] = {"role": "none"}
            continue
        if not enabled or spec.get("manager") not in ("venv", "conda"):
            result[name] = {"role": "build", "serves": False}
            continue
        groups.setdefault((str(spec["key"]), str(spec["staging"])), []).append(name)
    for index, members in enumerate(groups.values()):
        builder, pullers = members[0], members[1:]
        # One port per builder: lab hosts sharing one network must not collide.
        port = info[builder]["port"] + index
        result[builder] = {"role": "build", "serves": bool(pullers), "port": port}
        for puller in pullers:
            result[puller] = {
                "role": "pull",
                "from": builder,
                "address": info[builder]["address"],
                "port": port,
            }
    return result
