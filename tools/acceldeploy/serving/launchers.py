"""How a host's services start: one launcher strategy per way of running vLLM, chosen once.

`launcher_for(platform)` picks it from how the host runs vLLM (``HostPlatform.runtime``, its
python_env_manager): `VenvLauncher` runs vLLM (and Ray) from the env python_env built on the
host (conda or venv: Ascend, the CPU lab), `ContainerLauncher` `docker run`s them in the
stack's image (Gaudi always; Ascend when python_env_manager is container). Each owns what
differs between the two: the serve and Ray commands, whether the host has an env prefix, the
scripts the host sources, what the launcher execs, the unit's extra ExecStartPre= /
ExecStopPost=, ray-wait's interpreter, the NUMA pinning, the hardening and the argv check
(hostplan.py, unit.py, raynode.py ask the launcher, never the platform's runtime). The
engine's platform tuning (Gaudi's shape buckets, render.py) is the platform's, either way.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.platforms import HostPlatform
from acceldeploy.runtimes.python_env import built_prefix, env_prefix
from acceldeploy.serving import gaudi_launch
from acceldeploy.serving.service import LOOPBACK, WILDCARDS, Service
from acceldeploy.serving.values import Launch, UnitOptions

# Parsed by vLLM's own `vllm serve` parser and checks, in the host's environment.
ARGCHECK = """\
import json, sys
try:
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:  # vLLM 0.32 moved them
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(
    json.loads(sys.argv[1]))
validate_parsed_serve_args(args)
print("vllm accepts the argv")
"""


def sourced(command: Sequence[str], env_scripts: Sequence[str]) -> list[str]:
    """``command`` run by bash after it sourced ``env_scripts`` (the command itself when none)."""
    if not env_scripts:
        return list(command)
    sources = " && ".join(f"source {shlex.quote(s)}" for s in env_scripts)
    return ["/bin/bash", "-c", f'set +u; {sources} && exec "$0" "$@"', *command]


def argcheck_command(argv: Sequence[str], env_scripts: Sequence[str]) -> list[str] | None:
    """`python -c ARGCHECK '<json args>'` with the interpreter beside the serve command's
    `vllm`; None for commands that are not a host venv's `vllm serve`."""
    head = argv[0] if argv else ""
    base = posixpath.basename(head)
    if not head.startswith("/") or base != "vllm" or len(argv) < 3 or argv[1] != "serve":
        return None
    python, tail = posixpath.join(posixpath.dirname(head), "python"), ["--model", *argv[2:]]
    return sourced([python, "-c", ARGCHECK, json.dumps(tail)], env_scripts)


def ip_allow(launch: Launch, allow_from: Sequence[str]) -> list[str]:
    """The peers a service's unit exchanges IP traffic with (IPAddressDeny=any, then
    IPAddressAllow= these); [] for any peer. Loopback-bound on one host: localhost only. Bound
    beyond it with allow_from given (the gateways and monitors in front of it): those, the
    host itself (its bind address) and a multi-node service's nodes. Otherwise any peer."""
    if launch.host in LOOPBACK and not launch.nodes:
        return ["localhost"]
    if not allow_from:
        return []
    own = [] if launch.host in WILDCARDS else [launch.host]
    peers = [*own, *launch.nodes.values(), *allow_from]
    return ["localhost", *dict.fromkeys(p for p in peers if p not in LOOPBACK)]


def numa_binding(launch: Launch, topology: Sequence[Mapping[str, Any]]) -> tuple[str, int] | None:
    """(cpus, node) when every device of the service is known and on one NUMA node."""
    if not launch.devices or not topology:
        return None
    by_device = {int(t["device"]): t for t in topology if t.get("numa") is not None}
    if not all(d in by_device for d in launch.devices):
        return None
    nodes = {int(by_device[d]["numa"]) for d in launch.devices}
    if len(nodes) != 1:
        return None
    cpus: list[str] = []
    for d in launch.devices:
        for part in str(by_device[d].get("cpus") or "").split(","):
            if part.strip() and part.strip() not in cpus:
                cpus.append(part.strip())
    if not cpus:
        return None
    return ",".join(cpus), nodes.pop()


class Launcher(ABC):
    """What differs between running vLLM from the host's env and from a container."""

    def __init__(self, platform: HostPlatform) -> None:
        self.platform = platform

    @abstractmethod
    def env_prefix(self, inputs: Mapping[str, Any], built: Mapping[str, Any] | None) -> str | None:
        """The host's serving env (python_env's inputs, its build fact), None without one."""

    @abstractmethod
    def serve_command(self, prefix: str | None) -> tuple[str, ...]:
        """`vllm serve`, the head of the service's argv."""

    def ray_command(self, prefix: str | None) -> str:
        """`ray` of a multi-node service's node unit."""
        return "ray"

    def tuning(
        self,
        service: Service,
        length: int,
        block: int,
        options: Mapping[str, Any],
        shape: Mapping[str, Any] | None,
        cache_dir: str,
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """The platform's engine tuning: (env defaults the service's env overrides, engine
        options added to the service's). Gaudi's bucketing, sized for the service's shape (a
        value the service sets wins); none elsewhere."""
        if not self.platform.behaviour.shape_buckets:
            return {}, {}
        sized = gaudi_launch.shape_for(service.name, length, options, shape, block)
        return (
            gaudi_launch.service_env(
                sized, service.devices, recipe_dir(cache_dir), self.platform.bucketing
            ),
            gaudi_launch.engine_options(options, sized),
        )

    def host_env_scripts(self) -> tuple[str, ...]:
        """The scripts the host sources before it execs the launcher's command."""
        return self.platform.env_scripts

    @abstractmethod
    def exec_argv(
        self, launch: Launch, opts: UnitOptions, models_root: str, state: str, cache: str
    ) -> list[str]:
        """What the vLLM unit's launcher execs."""

    @abstractmethod
    def ray_exec_argv(
        self, node: Launch, opts: UnitOptions, models_root: str, state: str, cache: str
    ) -> list[str]:
        """What the Ray node unit's launcher execs (``node``: its launch, argv `ray start`)."""

    @abstractmethod
    def ray_wait_prefix(
        self, launch: Launch, opts: UnitOptions, helpers: str, state: str
    ) -> list[str]:
        """What runs ray-wait (the helper `helpers`/ray-wait, a Python script)."""

    def cleanup(self, name: str) -> list[str]:
        """The unit's ExecStartPre= / ExecStopPost= lines that clear a leftover run."""
        return []

    def before_exec(self, watch: Sequence[str]) -> list[str]:
        """What the launcher runs before it execs the server: `watch`, a watch of the
        launcher's own processes (a headless rank's, dpnode.py)."""
        return list(watch)

    @abstractmethod
    def unit_numa(
        self, launch: Launch, topology: Sequence[Mapping[str, Any]]
    ) -> tuple[str, int] | None:
        """The unit's CPUAffinity= / NUMAMask= pinning, None for none."""

    @abstractmethod
    def hardening(self, launch: Launch, allow_from: Sequence[str] = ()) -> dict[str, Any]:
        """What the sandbox of a unit (the templates' fixed hardening directives) depends
        on: the device nodes for DeviceAllow= and the peers of IPAddressAllow= (ip_allow)."""

    @abstractmethod
    def argcheck(self, launch: Launch) -> list[str] | None:
        """The command that checks the argv with the pinned vLLM's parser, None where it
        cannot run before the service starts."""


class VenvLauncher(Launcher):
    """vLLM from the env python_env built on the host (Ascend, the CPU lab)."""

    def env_prefix(self, inputs: Mapping[str, Any], built: Mapping[str, Any] | None) -> str | None:
        return built_prefix(env_prefix(inputs), built)

    def serve_command(self, prefix: str | None) -> tuple[str, ...]:
        """The env's `vllm serve` (its prefix)."""
        if not prefix:
            raise AcceldeployError(
                f"platform {self.platform.name}: no Python environment path; set "
                "python_env_venv_path or python_env_conda_root / python_env_conda_env_path"
            )
        return (posixpath.join(prefix, "bin", "vllm"), "serve")

    def ray_command(self, prefix: str | None) -> str:
        return posixpath.join(posixpath.dirname(self.serve_command(prefix)[0]), "ray")

    def exec_argv(
        self, launch: Launch, opts: UnitOptions, models_root: str, state: str, cache: str
    ) -> list[str]:
        return list(launch.argv)

    def ray_exec_argv(
        self, node: Launch, opts: UnitOptions, models_root: str, state: str, cache: str
    ) -> list[str]:
        return list(node.argv)

    def ray_wait_prefix(
        self, launch: Launch, opts: UnitOptions, helpers: str, state: str
    ) -> list[str]:
        return [posixpath.join(posixpath.dirname(launch.argv[0]), "python")]

    def unit_numa(
        self, launch: Launch, topology: Sequence[Mapping[str, Any]]
    ) -> tuple[str, int] | None:
        return numa_binding(launch, topology)

    def hardening(self, launch: Launch, allow_from: Sequence[str] = ()) -> dict[str, Any]:
        return {"device_allow": list(launch.device_paths), "ip_allow": ip_allow(launch, allow_from)}

    def argcheck(self, launch: Launch) -> list[str] | None:
        return argcheck_command(launch.argv, launch.env_scripts)


class ContainerLauncher(Launcher):
    """vLLM (and Ray) in the stack's image under `docker run`: the container holds the
    devices (the platform's container runtime, else one --device per device node) and the
    host's network; gaudi_launch.py builds the command. The image sources the stack's env
    scripts (Ascend's CANN) itself: the host has no CANN to source."""

    def image(self, opts: UnitOptions) -> str:
        return opts.gaudi_image or self.platform.image

    def env_prefix(self, inputs: Mapping[str, Any], built: Mapping[str, Any] | None) -> str | None:
        return None  # the image holds vLLM

    def serve_command(self, prefix: str | None) -> tuple[str, ...]:
        """The image's `vllm serve` (its PATH)."""
        return ("vllm", "serve")

    def host_env_scripts(self) -> tuple[str, ...]:
        return ()

    def _run_args(self, device_paths: Sequence[str]) -> list[str]:
        """The stack's `docker run` flags, and the devices where no container runtime of the
        platform's hands them over."""
        devices = [] if self.platform.behaviour.container_runtime_devices else device_paths
        return [*self.platform.container_run_args, *(f"--device={p}" for p in devices)]

    def _cache_mount(self, cache: str) -> str:
        """What of the service's cache directory the container writes: Gaudi's recipes, else
        all of it (vLLM's compile cache under XDG_CACHE_HOME)."""
        return recipe_dir(cache) if self.platform.behaviour.shape_buckets else cache

    def _env_names(self, env: Mapping[str, str]) -> list[str]:
        """The unit's variables the container gets: the launch's, and XDG_CACHE_HOME where
        the cache is mounted whole."""
        whole = not self.platform.behaviour.shape_buckets
        return sorted({*env, *(["XDG_CACHE_HOME"] if whole else [])})

    def _inner(self, argv: Sequence[str]) -> list[str]:
        return sourced(argv, self.platform.env_scripts)

    def exec_argv(
        self, launch: Launch, opts: UnitOptions, models_root: str, state: str, cache: str
    ) -> list[str]:
        """`docker run` around vLLM's argv, pinned to the devices' NUMA node."""
        written = self._cache_mount(cache)
        mounts = [(models_root, models_root, False), (written, written, True)]
        if launch.ray_unit:  # the driver reaches its node's Ray through the session directory
            mounts.append((state, state, True))
        return gaudi_launch.docker_argv(
            launch.name,
            self.image(opts),
            [*self._env_names(launch.env), *launch.secret_env],
            mounts,
            self._inner(launch.argv),
            self._run_args(launch.device_paths),
            numa_binding(launch, opts.topology),
        )

    def ray_exec_argv(
        self, node: Launch, opts: UnitOptions, models_root: str, state: str, cache: str
    ) -> list[str]:
        mounts = [(models_root, models_root, False), (state, state, True), (cache, cache, True)]
        return gaudi_launch.docker_argv(
            node.name,
            self.image(opts),
            sorted(node.env),
            mounts,
            self._inner(node.argv),
            self._run_args(node.device_paths),
        )

    def ray_wait_prefix(
        self, launch: Launch, opts: UnitOptions, helpers: str, state: str
    ) -> list[str]:
        return ["/usr/bin/docker", "run", "--rm", "--net=host", "-v", f"{helpers}:{helpers}:ro",
                "-v", f"{state}:{state}:rw", self.image(opts), "python3"]  # fmt: skip

    def cleanup(self, name: str) -> list[str]:
        return [f"-/usr/bin/docker rm -f acceldeploy-{name}"]

    def before_exec(self, watch: Sequence[str]) -> list[str]:
        """Nothing: the engine runs in the container, not as the launcher's child, so a
        watch of the launcher's processes would never see it."""
        return []

    def unit_numa(
        self, launch: Launch, topology: Sequence[Mapping[str, Any]]
    ) -> tuple[str, int] | None:
        return None  # docker run's --cpuset-cpus / --cpuset-mems pin it (exec_argv)

    def hardening(self, launch: Launch, allow_from: Sequence[str] = ()) -> dict[str, Any]:
        return {"device_allow": [], "ip_allow": []}  # the container runtime holds both

    def argcheck(self, launch: Launch) -> list[str] | None:
        return None  # vLLM is in the image, not on the host


def recipe_dir(cache_dir: str) -> str:
    """Gaudi's HPU graph recipes, under the service's cache directory."""
    return f"{cache_dir}/hpu-recipes"


def launcher_for(platform: HostPlatform) -> Launcher:
    """The host's launcher: the one place that asks whether it runs a container."""
    return ContainerLauncher(platform) if platform.container else VenvLauncher(platform)
