"""The gateway's HAProxy plan from the inventory: one frontend per published service (model
name) on its own port, its servers every host that serves it (a multi-node group's head), each
weighted by the devices it runs on. Every mistake is refused here, before any host is touched,
naming the variable and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway import routing as routes
from acceldeploy.inventory import bounds, groups, nonserving, roledefaults
from acceldeploy.serving.service import (
    LOOPBACK,
    WILDCARDS,
    Service,
    on_host,
    parse_services,
    reached_by,
)

VAR = "gateway_frontends"
FRONTEND_KEYS = ("service", "port", "bind", "servers", "routing")
GROUP = groups.GATEWAYS
MAX_WEIGHT = 256  # HAProxy's bound
# What the role installs from the distribution (the offline bundle carries it).
PACKAGES = ("haproxy",)


@dataclass(frozen=True)
class Server:
    """One backend server: an inventory host's service, as the gateway reaches it."""

    host: str
    address: str
    port: int
    weight: int
    # The service wants an API key on /v1: the gateway adds it (the keys map).
    keyed: bool


@dataclass(frozen=True)
class Frontend:
    service: str
    port: int
    bind: str
    servers: tuple[Server, ...]
    routing: str = routes.LEASTCONN
    # The backend's balance lines (routes.lines): the template prints them.
    balance: tuple[str, ...] = ("balance leastconn",)
    reads_body: bool = False
    haproxy_since: str = ""  # the oldest HAProxy that parses its lines (routes.haproxy_since)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Settings:
    """The role's variables other than the frontends."""

    bind: str = "127.0.0.1"
    client_keys: bool = False
    allow_unauthenticated: bool = False
    stats_port: int = 0
    # gateway_tls_certificate: a path on each gateway host (the role copies nothing there).
    tls_certificate: str = ""
    # How a frontend picks a server unless it names its own routing (routing.py).
    routing: str = routes.LEASTCONN
    affinity_header: str = routes.Affinity.header
    affinity_balance_factor: int = routes.Affinity.balance_factor


def _served(
    serving: Mapping[str, Mapping[str, Any]],
) -> dict[str, list[tuple[str, str, Service]]]:
    """service name -> [(host, host address, service)] of the hosts that answer its HTTP."""
    found: dict[str, list[tuple[str, str, Service]]] = {}
    for host, view in sorted(serving.items()):
        try:
            services = parse_services(view.get("services") or [], str(view.get("platform")))
        except AcceldeployError as exc:
            raise AcceldeployError(f"{host}: {exc}") from None
        for service in services:
            if service.nodes and service.nodes[0] != host:
                continue  # a worker node of a group: its head answers
            address = str(view.get("address") or host)
            found.setdefault(service.name, []).append((host, address, service))
    return found


def _server(
    host: str, address: str, service: Service, gateways: Mapping[str, str], var: str
) -> Server:
    try:
        reach = reached_by(service, host, address, gateways.values(), "gateway")
    except AcceldeployError as exc:
        raise AcceldeployError(f"{var}: {exc}") from None
    # Its devices: the ranks of its engine (a group's over all its nodes).
    weight = min(max(1, service.ranks), MAX_WEIGHT)
    return Server(host, reach, service.port, weight, service.api_key is not None)


def _port(value: Any, var: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise AcceldeployError(f"{var} must be a port (1-65535), got {value!r}")
    return value


def _certificate(path: str) -> None:
    """gateway_tls_certificate: the PEM HAProxy reads on the gateway host, its `crt`
    argument as the template prints it (unquoted: a space would end it)."""
    if path and (not path.startswith("/") or any(c.isspace() for c in path)):
        raise AcceldeployError(
            "gateway_tls_certificate must be the absolute path, without spaces, of the PEM "
            "(certificate, chain and key) on the gateway hosts, such as "
            f"/etc/haproxy/certs/gateway.pem, or empty for no TLS; got {path!r}"
        )


def _pick(raw: Any, offered: list[Server], service: str, var: str) -> tuple[Server, ...]:
    """The frontend's own `servers` list (each {host, port} a service of that name has), or
    every host that serves it."""
    if raw is None:
        return tuple(offered)
    if not isinstance(raw, list) or not raw:
        raise AcceldeployError(f"{var} must be a non-empty list of {{host, port}}, or absent")
    by_key = {(s.host, s.port): s for s in offered}
    chosen = []
    for i, entry in enumerate(raw):
        where = f"{var}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) - {"host", "port"}:
            raise AcceldeployError(f"{where} must be a mapping with host and port")
        host, port = str(entry.get("host")), _port(entry.get("port"), f"{where}.port")
        if (host, port) not in by_key:
            has = ", ".join(f"{s.host}:{s.port}" for s in offered)
            raise AcceldeployError(
                f"{where}: no service {service} answers on {host}:{port}; it is served on {has}"
            )
        chosen.append(by_key[(host, port)])
    return tuple(chosen)


def plan(
    frontends: Any,
    serving: Mapping[str, Mapping[str, Any]],
    gateways: Mapping[str, str],
    settings: Settings = Settings(),
    gateway_services: Mapping[str, Any] | None = None,
) -> list[Frontend]:
    """gateway_frontends ([{service, port, bind?, servers?}]) against the serving hosts'
    views ({host: {address, platform, services}}) and the gateways ({host: address});
    gateway_services ({gateway: its acceldeploy_services}): none that no serving host runs."""
    if not gateways:
        raise AcceldeployError("the gateways group is empty: list the gateway hosts in it")
    if not isinstance(frontends, list) or not frontends:
        raise AcceldeployError(
            f"{VAR} must list the services the gateway publishes, e.g. "
            "[{service: qwen3-vl, port: 9001}]"
        )
    _certificate(settings.tls_certificate)
    routes.mode(settings.routing)
    affinity = routes.Affinity(
        routes.check_header(settings.affinity_header),
        int(bounds.number("gateway_affinity_balance_factor", settings.affinity_balance_factor)),
    )
    served = _served(serving)
    _keys(served)
    services = (view.get("services") for view in serving.values())
    nonserving.refuse_unserved(GROUP, gateway_services or {}, services)
    result: list[Frontend] = []
    published: dict[Any, int] = {}
    for i, raw in enumerate(frontends):
        var = f"{VAR}[{i}]"
        if not isinstance(raw, Mapping) or set(raw) - set(FRONTEND_KEYS):
            raise AcceldeployError(f"{var} must be a mapping of {', '.join(FRONTEND_KEYS)}")
        name = raw.get("service")
        if name in published:
            raise AcceldeployError(
                f"{var}.service {name} is also {VAR}[{published[name]}].service: HAProxy names "
                "a frontend and its backend after the model, one per model; publish it once"
            )
        if name not in served:
            known = ", ".join(sorted(served)) or "none"
            raise AcceldeployError(
                f"{var}.service {name!r}: no serving host runs it (acceldeploy_services has "
                f"{known})"
            )
        port = _port(raw.get("port"), f"{var}.port")
        bind = str(raw.get("bind") or settings.bind)
        if bind not in LOOPBACK and not (settings.client_keys or settings.allow_unauthenticated):
            raise AcceldeployError(
                f"{var}: the gateway binds {bind} with no gateway_client_keys: anyone who "
                "reaches it can use the model; set gateway_client_keys (from the vault), bind "
                "127.0.0.1, or set gateway_allow_unauthenticated: true"
            )
        offered = [_server(h, a, s, gateways, var) for h, a, s in served[str(name)]]
        servers = _pick(raw.get("servers"), offered, str(name), f"{var}.servers")
        how = routes.mode(raw.get("routing", settings.routing), f"{var}.routing")
        balance = routes.lines(how, affinity)
        reads_body = routes.reads_body(how)
        since = routes.haproxy_since(how)
        result.append(Frontend(str(name), port, bind, servers, how, balance, reads_body, since))
        published[name] = i
    return result


def _keys(served: Mapping[str, list[tuple[str, str, Service]]]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for name, hosts in served.items():
        found = {s.api_key for _, _, s in hosts}
        if len(found) > 1:
            names = ", ".join(h for h, _, _ in hosts)
            raise AcceldeployError(
                f"acceldeploy_services {name}: api_key differs between {names}; behind one "
                "gateway a model's services share one key"
            )
        (key,) = found
        if key is not None:
            keys[name] = key
    return keys


def backend_keys(serving: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """service name -> its API key, which every host serving it must share (the gateway adds
    one Authorization header per backend)."""
    return _keys(_served(serving))


def url_from(frontend: Frontend, gateway_address: str, client_address: str, tls: bool) -> str:
    """The frontend's URL as a client at `client_address` reaches it (the same address as the
    gateway's: the same machine)."""
    same = client_address == gateway_address
    if frontend.bind in LOOPBACK and not same:
        raise AcceldeployError(
            f"gateway_bind: the gateway's {frontend.service} frontend binds {frontend.bind}, "
            f"which {client_address} cannot reach; bind it where the serving hosts reach it "
            "(gateway_bind, with gateway_client_keys)"
        )
    host = on_host(frontend.bind) if same else (
        gateway_address if frontend.bind in WILDCARDS else frontend.bind)  # fmt: skip
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{host}:{frontend.port}"


def serving_view(host: str, services: Any, platform: Any, address: Any) -> dict[str, Any]:
    """What the plan needs of a serving host: its services, platform and address (an unset
    one is the host's own name, as Ansible reaches it)."""
    return {"services": services or [], "platform": str(platform or "cpu"),
            "address": str(address or host)}  # fmt: skip


def is_gateway(hostvars: Mapping[str, Any]) -> bool:
    return groups.in_group(hostvars, GROUP)


def serving_hosts(hosts: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The hosts that run vLLM: outside the gateways and the monitors, or serving as well."""
    return {host: hv for host, hv in hosts.items() if groups.serves(hv)}


def address(host: str, hostvars: Mapping[str, Any]) -> str:
    """Where the other hosts reach a host: its ansible_host, else its name."""
    return str(hostvars.get("ansible_host") or host)


def fleet_views(
    every: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """From every host's variables: the serving hosts' views and the gateways' addresses."""
    serving, gateways = {}, {}
    for host, hv in every.items():
        if is_gateway(hv):
            gateways[host] = address(host, hv)
        if groups.serves(hv):
            services, platform = hv.get("acceldeploy_services"), hv.get("acceldeploy_platform")
            serving[host] = serving_view(host, services, platform, address(host, hv))
    return serving, gateways


def settings(hostvars: Mapping[str, Any]) -> Settings:
    """A gateway host's settings: its variables, else the role's defaults."""
    return Settings(
        bind=str(roledefaults.value(hostvars, "gateway_bind")),
        client_keys=bool(roledefaults.value(hostvars, "gateway_client_keys")),
        allow_unauthenticated=bool(roledefaults.value(hostvars, "gateway_allow_unauthenticated")),
        stats_port=int(roledefaults.value(hostvars, "gateway_stats_port") or 0),
        tls_certificate=str(roledefaults.value(hostvars, "gateway_tls_certificate") or ""),
        routing=str(roledefaults.value(hostvars, "gateway_routing")),
        affinity_header=str(roledefaults.value(hostvars, "gateway_affinity_header")),
        affinity_balance_factor=roledefaults.value(hostvars, "gateway_affinity_balance_factor"),
    )


def targets(
    gateways: Mapping[str, Mapping[str, Any]], host: str, services: list[str]
) -> list[dict[str, str]]:
    """[{gateway, socket, service}]: where the rollout drains and readies this host's services,
    from each gateway's {frontends, socket}: a frontend of the service that sends to every
    host serving it, or names this host among its servers."""
    found = []
    for gateway, view in sorted(gateways.items()):
        socket_path = str(view.get("socket") or roledefaults.value({}, "gateway_stats_socket"))
        for raw in view.get("frontends") or []:
            servers = raw.get("servers")
            if raw.get("service") in services and (
                servers is None or any(str(s.get("host")) == host for s in servers)
            ):
                found.append({"gateway": gateway, "socket": socket_path,
                              "service": str(raw["service"])})  # fmt: skip
    return found
