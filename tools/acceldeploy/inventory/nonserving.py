"""What the inventory gives the hosts that run no vLLM (the gateways and the monitors that do
not set acceldeploy_serves, groups.py): a service of theirs that no serving host runs would run
nowhere, since every serving play skips them. The fleet's own services, which such a host
inherits from group_vars/all like every host, run on the serving hosts and pass."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from acceldeploy.errors import AcceldeployError


def service_names(services: Any) -> list[str]:
    """The names of an acceldeploy_services value, unparsed (an entry without one shown as
    it is)."""
    if not services:
        return []
    entries = services if isinstance(services, list) else [services]
    return [str(e.get("name")) if isinstance(e, Mapping) else repr(e) for e in entries]


def unserved(host: str, group: str, services: Any, served: Collection[str]) -> None:
    """Refuse the services a host of the gateways or monitors group is given that no serving
    host runs (served: the serving hosts' service names)."""
    stray = [name for name in service_names(services) if name not in served]
    if stray:
        them = ", ".join(dict.fromkeys(stray))
        raise AcceldeployError(
            f"{host}: acceldeploy_services gives it {them}, which no serving host runs, but "
            f"{host} is in the {group} group, whose hosts run no vLLM unless told (every "
            f"serving play skips them): move {them} to the acceldeploy_services of a serving "
            f"host, set acceldeploy_serves: true on {host} to serve them there as well, or "
            f"take {host} out of the {group} group"
        )


def refuse_unserved(group: str, own: Mapping[str, Any], serving: Iterable[Any]) -> None:
    """Refuse, for each host of the group (own: {host: its acceldeploy_services}), the
    services no serving host runs (serving: each serving host's acceldeploy_services)."""
    served = {name for services in serving for name in service_names(services)}
    for host, services in sorted(own.items()):
        unserved(str(host), group, services, served)
