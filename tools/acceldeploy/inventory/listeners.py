"""What listens on a host's ports (a `Listener`: the port, the variable that sets it and what
listens there), and the rule that no two of them share one (`check`: the later of two on one
port is refused, naming both variables).

Each role's contract says what it opens (tools/acceldeploy/roles/<role>.py `listeners`), from
the helpers here (sshd, HAProxy) and in serving and monitor; `roles.check_ports` is the one
check of a host, over all of them. The services' own list is checked here too, when it is
parsed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import roledefaults


@dataclass(frozen=True)
class Listener:
    port: int
    var: str  # the variable that sets the port
    what: str  # what listens on it


def check(listeners: Iterable[Listener], host: str = "") -> None:
    """No two listeners on one port: the first that takes a port taken before is refused."""
    taken: dict[int, Listener] = {}
    for listener in listeners:
        first = taken.setdefault(listener.port, listener)
        if first is not listener:
            where = f"{host}: " if host else ""
            raise AcceldeployError(
                f"{where}{listener.var} {listener.port} is also {first.var} ({first.what}) on "
                f"this host: {listener.what} would listen on it too; give {listener.var} "
                "another port"
            )


def whole(value: Any) -> int | None:
    """A port as the inventory gives it (int or digits), else None (its own role refuses it)."""
    if isinstance(value, bool):
        return None
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def ssh(hostvars: Mapping[str, Any]) -> list[Listener]:
    port = whole(hostvars.get("ansible_port") or 22)
    return [Listener(port, "ansible_port", "sshd, 22 when unset")] if port else []


def gateway(frontends: Any, stats_port: Any) -> list[Listener]:
    """A gateway's HAProxy (gateway_frontends, gateway_stats_port): its stats page, then each
    frontend."""
    found = []
    stats = whole(stats_port)
    if stats:
        found.append(Listener(stats, "gateway_stats_port", "the gateway's stats page"))
    for i, frontend in enumerate(frontends if isinstance(frontends, list) else []):
        port = whole(frontend.get("port")) if isinstance(frontend, Mapping) else None
        if port:
            what = f"the gateway's {frontend.get('service')} frontend"
            found.append(Listener(port, f"gateway_frontends[{i}].port", what))
    return found


def gateway_of(hostvars: Mapping[str, Any]) -> list[Listener]:
    """A gateway host's HAProxy, from its variables (the role's defaults where unset)."""
    return gateway(
        roledefaults.value(hostvars, "gateway_frontends"),
        roledefaults.value(hostvars, "gateway_stats_port"),
    )
