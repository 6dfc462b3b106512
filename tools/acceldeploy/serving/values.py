"""The value types serving passes between its layers: what a host adds to its services
(HostContext), one rendered launch (Launch) and the role's unit options (UnitOptions).

At the bottom of serving: it imports nothing else of serving, and everything above may import
it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.serving.layout import UnitLayout


@dataclass(frozen=True)
class HostContext:
    """What a host's inventory adds to its services: where models and the env live, and the
    per-service traffic shapes Gaudi's bucketing is sized for."""

    models_root: str = "/models"
    env_prefix: str | None = None
    gaudi_shapes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    host: str = ""  # the inventory hostname (a multi-node service's nodes name it)
    node_ips: Mapping[str, str] = field(default_factory=dict)  # every host's node address


@dataclass(frozen=True)
class Launch:
    name: str
    model_path: str
    argv: list[str]
    env: dict[str, str]
    secret_env: list[str]
    platform: str
    runtime: str
    devices: list[int]
    device_paths: list[str]
    env_scripts: list[str]
    port: int
    host: str
    max_model_len: int
    kv: dict[str, Any]
    # A multi-node service: its nodes {hostname: address}, the Ray unit and cluster it runs on.
    nodes: dict[str, str] = field(default_factory=dict)
    ray_unit: str | None = None
    cluster_address: str | None = None

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["command_line"] = self.command_line()
        return data


@dataclass(frozen=True)
class UnitOptions:
    """The vllm_service role's variables that shape units: field X is `vllm_service_X`
    (tests/unit/test_unit_render.py checks this against the role's argument specs)."""

    user: str = "vllm"
    groups: tuple[str, ...] | None = None  # None: the platform's device groups
    launcher_dir: str = "/usr/local/libexec/acceldeploy"
    secret_dir: str = "/etc/acceldeploy/secrets"
    start_timeout: int = 0  # 0: the platform's
    restart_sec: int = 10
    start_limit_burst: int = 3
    # [{device, numa, cpus}] (gaudi_runtime records module_id / numa / cpus)
    topology: tuple[Mapping[str, Any], ...] = ()
    gaudi_image: str = ""  # "": the platform's pinned image
    # ExecStop waits up to this long for in-flight requests before a planned stop (0: no wait)
    drain_timeout: int = 120
    drain_hook: str = ""  # run as root before that wait (take the host out of a balancer)
    ready_hook: str = ""  # run as root once /health answers (put it back)
    # Beyond loopback, the only addresses (with localhost) a service takes traffic from: the
    # gateways and monitors in front of it. Empty: any.
    allow_from: tuple[str, ...] = ()

    @classmethod
    def from_vars(cls, raw: Mapping[str, Any]) -> UnitOptions:
        """From {field: value}; unknown keys refused. None, "" and [] keep the default (the
        role passes every variable, some empty)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise AcceldeployError(
                f"vllm_service unit options {unknown} are unknown; allowed: {sorted(names)}"
            )
        values: dict[str, Any] = {k: v for k, v in raw.items() if v not in (None, "", [])}
        if "groups" in values:
            values["groups"] = tuple(str(v) for v in values["groups"])
        if "topology" in values:
            values["topology"] = tuple(dict(t) for t in values["topology"])
        if "allow_from" in values:
            values["allow_from"] = allowed_peers(values["allow_from"])
        for key in ("start_timeout", "restart_sec", "start_limit_burst", "drain_timeout"):
            if key in values:
                values[key] = int(values[key])
        for key in ("drain_hook", "ready_hook"):
            hook = str(values.get(key, ""))
            if hook and (not hook.startswith("/") or "\n" in hook):
                raise AcceldeployError(
                    f"{var_name(key)} must be one command line starting with an absolute path "
                    f"(systemd runs it), got {hook!r}"
                )
        if values.get("drain_timeout", 0) < 0:
            raise AcceldeployError(f"{var_name('drain_timeout')} must be 0 or more seconds")
        return cls(**values)

    @property
    def layout(self) -> UnitLayout:
        return UnitLayout(launcher_dir=self.launcher_dir, secret_dir=self.secret_dir)

    @classmethod
    def from_hostvars(cls, hostvars: Mapping[str, Any]) -> UnitOptions:
        return cls.from_vars(
            {f.name: hostvars.get(var_name(f.name)) for f in dataclasses.fields(cls)}
        )


def allowed_peers(values: Any) -> tuple[str, ...]:
    """vllm_service_allow_from: IP addresses or prefixes (IPAddressAllow= takes no names)."""
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise AcceldeployError(f"{var_name('allow_from')} must be a list of IP addresses")
    peers = []
    for i, value in enumerate(values):
        try:
            net = ipaddress.ip_network(str(value), strict=False)
        except ValueError:
            raise AcceldeployError(
                f"{var_name('allow_from')}[{i}]: {value!r} is not an IP address or prefix; give "
                "the gateway's or monitor's address (set acceldeploy_node_ip on a host whose "
                "ansible_host is a name)"
            ) from None
        whole = net.prefixlen == net.max_prefixlen
        peers.append(str(net.network_address) if whole else str(net))
    return tuple(peers)


def var_name(option: str) -> str:
    """The inventory / role variable of a unit option."""
    return f"vllm_service_{option}"
