"""A host's platform: its platform's class and profile, joined with the host's stack and how it
runs vLLM, in one object.

A `HostPlatform` joins the platform's profile (its class's ``profile``, data/platforms.yml:
block size, device variable and nodes, memory budget, default env and flags, device groups,
start timeout) with the host's stack (versions/stacks.yml, the one its acceldeploy_stack names
or the platform's default: the vLLM version the services must report, its engine options, its
env defaults over the platform's, the env scripts, the Gaudi image, how its containers start
and the names its bucketing is set under) and the host's runtime (python_env_manager). Every
module takes a host's platform facts from here; what the platform does its own way is its
class in ``acceldeploy.platforms`` (``HostPlatform.behaviour``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import defects
from acceldeploy.planner.stacks import bucketing, engine_additions, host_stack, metric_names
from acceldeploy.platforms import PlatformBehaviour, find, for_name, known_names

CONTAINER = "container"
# The group of Docker's socket: a unit that runs the docker CLI joins it (root-equivalent).
DOCKER_GROUP = "docker"


@dataclass(frozen=True)
class HostPlatform:
    name: str
    block_size: int
    device_env: str | None
    device_memory_bytes: int | None
    activation_gib: float
    non_torch_gib: float
    runtime: str  # conda | venv | container: how the host runs vLLM (python_env_manager)
    device_node_pattern: str | None
    vllm_version: str  # what the services' /version must report (the stack's pin)
    engine_options: str  # data/engine-options/<this>.json: the engine's `vllm serve` options
    groups: tuple[str, ...] = ()  # the device nodes' owners the service user joins
    start_timeout: int = 1800
    env: dict[str, str] = field(default_factory=dict)
    env_scripts: tuple[str, ...] = ()
    device_nodes: tuple[str, ...] = ()
    default_args: dict[str, Any] = field(default_factory=dict)
    image: str = ""  # container platforms: the image that holds vLLM
    container_run_args: tuple[str, ...] = ()
    # Multi-node: each node's own variables ({ip}: its address) and the variables that name
    # the NIC the collectives use (cluster.node_env).
    node_env: dict[str, str] = field(default_factory=dict)
    # What every node of a multi-node service starts with: the stack's workarounds' (defects.py).
    group_env: dict[str, str] = field(default_factory=dict)
    interface_env: tuple[str, ...] = ()
    ray_resource: str = "CPU"  # what Ray counts this platform's devices as
    stack: str = ""  # the stack's name (versions/stacks.yml)
    # (flag, choice) the stack's plugin adds to `vllm serve`'s parser
    engine_additions: tuple[tuple[str, str], ...] = ()
    # Gaudi: the env names the bucketing is set under (planner.stacks.DEFAULT_BUCKETING)
    bucketing: dict[str, str] = field(default_factory=dict)
    # role -> the vLLM /metrics series of the stack (planner.stacks.DEFAULT_METRICS)
    metrics: dict[str, str] = field(default_factory=dict)
    # the stack's vLLM's KV arithmetic where versions differ (planner.kvplan.KV_RULES)
    kv_rules: tuple[str, ...] = ()
    # What the stack's vLLM splits over hosts with --nnodes (tensor, pipeline; none: it cannot).
    nnodes_split: tuple[str, ...] = ()

    @property
    def behaviour(self) -> PlatformBehaviour:
        return for_name(self.name)

    @property
    def container(self) -> bool:
        return self.runtime == CONTAINER

    def device_paths(self, devices: list[int]) -> list[str]:
        pattern = self.device_node_pattern
        per_device = [pattern.format(index=d) for d in devices] if pattern else []
        return [*self.device_nodes, *per_device]


def platform_names() -> list[str]:
    return sorted(known_names())


RUNTIMES = ("conda", "venv", CONTAINER)


def host_runtime(platform: str, default: str, manager: str, pins: dict[str, Any]) -> str:
    """How the host runs vLLM: python_env_manager, else the platform's default. A container
    needs the stack's image; a platform whose only runtime is its image (Gaudi) has no other."""
    runtime = manager or default
    if runtime not in RUNTIMES:
        raise AcceldeployError(
            f"python_env_manager {runtime!r} is unknown; use one of {', '.join(RUNTIMES)}"
        )
    if default == CONTAINER and runtime != CONTAINER:
        raise AcceldeployError(
            f"python_env_manager {runtime} does not fit platform {platform}: its stacks ship "
            "vLLM only in their image; use container (or leave python_env_manager empty)"
        )
    if runtime == CONTAINER and not pins.get("image"):
        raise AcceldeployError(
            f"python_env_manager container does not fit platform {platform}: stack "
            f"{pins['name']} names no image; pick a stack with one (acceldeploy plan stacks), "
            f"or use {default}"
        )
    return runtime


def runs_in_image(platform: str, manager: str, pins: dict[str, Any]) -> bool:
    """Whether a host of ``platform`` on the stack ``pins`` runs vLLM in the stack's image."""
    default = str(for_name(platform).profile["runtime"])
    return host_runtime(platform, default, manager, pins) == CONTAINER


def get_platform(
    name: str, stacks_file: str | None = None, stack_name: str = "", manager: str = ""
) -> HostPlatform:
    """The platform's profile joined with the host's stack (``stack_name``: its
    acceldeploy_stack; empty: the platform's default) and how the host runs vLLM
    (``manager``: its python_env_manager; empty: the platform's default)."""
    behaviour = find(name)
    if behaviour is None:
        raise AcceldeployError(
            f"acceldeploy_platform {name!r} is unknown; set it to one of "
            f"{', '.join(platform_names())}"
        )
    raw = behaviour.profile
    pins = host_stack(name, stack_name, stacks_file or None)
    runtime = host_runtime(name, str(raw["runtime"]), manager, pins)
    groups = tuple(str(g) for g in raw["groups"])
    if runtime == CONTAINER and DOCKER_GROUP not in groups:
        groups = (*groups, DOCKER_GROUP)
    return HostPlatform(
        name=name,
        block_size=int(raw["block_size"]),
        device_env=raw["device_env"],
        device_memory_bytes=raw["device_memory_bytes"],
        activation_gib=float(raw["activation_gib"]),
        non_torch_gib=float(raw["non_torch_gib"]),
        runtime=runtime,
        device_node_pattern=raw["device_node_pattern"],
        vllm_version=str(pins["vllm"]),
        engine_options=str(pins["engine_options"]),
        groups=groups,
        start_timeout=int(raw["start_timeout"]),
        env={k: str(v) for k, v in {**raw["env"], **(pins.get("env") or {})}.items()},
        env_scripts=tuple(str(s) for s in pins.get("env_scripts") or ()),
        device_nodes=tuple(raw["device_nodes"]),
        default_args=dict(raw["default_args"]),
        image=str(pins.get("image") or ""),
        container_run_args=tuple(str(a) for a in pins.get("docker_run_args") or ()),
        node_env={k: str(v) for k, v in (raw.get("node_env") or {}).items()},
        group_env=defects.group_env(pins),
        interface_env=tuple(str(v) for v in raw.get("interface_env") or ()),
        ray_resource=str(raw.get("ray_resource") or "CPU"),
        stack=str(pins["name"]),
        engine_additions=engine_additions(pins),
        bucketing=bucketing(pins),
        metrics=metric_names(pins),
        kv_rules=tuple(str(r) for r in pins.get("kv_rules") or ()),
        nnodes_split=tuple(str(s) for s in pins.get("nnodes_split") or ()),
    )
