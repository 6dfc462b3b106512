"""Platform profiles: what differs between Ascend, Gaudi and the CPU lab."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError


@dataclass(frozen=True)
class Platform:
    name: str
    block_size: int
    device_env: str | None
    device_memory_bytes: int | None
    activation_gib: float
    non_torch_gib: float
    runtime: str
    serve_command: tuple[str, ...]
    smi: str | None
    device_node_pattern: str | None
    env: dict[str, str] = field(default_factory=dict)
    env_scripts: tuple[str, ...] = ()
    device_nodes: tuple[str, ...] = ()
    default_args: dict[str, Any] = field(default_factory=dict)

    def device_paths(self, devices: list[int]) -> list[str]:
        pattern = self.device_node_pattern
        per_device = [pattern.format(index=d) for d in devices] if pattern else []
        return [*self.device_nodes, *per_device]


def platform_names() -> list[str]:
    return sorted(load("platforms"))


def get_platform(name: str) -> Platform:
    raw: dict[str, Any] | None = load("platforms").get(name)
    if raw is None:
        raise AcceldeployError(
            f"acceldeploy_platform {name!r} is unknown; set it to one of "
            f"{', '.join(platform_names())}"
        )
    return Platform(
        name=name,
        block_size=int(raw["block_size"]),
        device_env=raw["device_env"],
        device_memory_bytes=raw["device_memory_bytes"],
        activation_gib=float(raw["activation_gib"]),
        non_torch_gib=float(raw["non_torch_gib"]),
        runtime=str(raw["runtime"]),
        serve_command=tuple(str(a) for a in raw["serve_command"]),
        smi=raw["smi"],
        device_node_pattern=raw["device_node_pattern"],
        env={k: str(v) for k, v in raw["env"].items()},
        env_scripts=tuple(raw["env_scripts"]),
        device_nodes=tuple(raw["device_nodes"]),
        default_args=dict(raw["default_args"]),
    )
