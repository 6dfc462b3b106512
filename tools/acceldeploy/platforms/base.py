"""What every platform answers, and the answers most platforms share.

One subclass per platform (its package's platform.py: ascend/, gaudi/, cpu/), found by its name
with ``acceldeploy.platforms.for_name``. A class says what its platform does its own way and
reads its numbers (block size, memory, env, device nodes), its ``profile``, from
data/platforms.yml; ``acceldeploy.planner.platforms`` joins them with the host's stack into a
``HostPlatform``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from acceldeploy.data_files import load
from acceldeploy.platforms.exporter import Exporter

HEALTHY = "OK"


@dataclass(frozen=True)
class DeviceReading:
    """One device as the platform's tool lists it."""

    index: int  # the index the services' devices name it by
    label: str  # how reports name it (npu2, hpu0)
    used_mib: float | None
    health: str  # HEALTHY, or what the tool says instead


class PlatformBehaviour:
    """A platform's behaviour; subclasses set ``name`` and ``stack_keys``."""

    name: ClassVar[str]
    # The keys each of its stacks (versions/stacks.yml) must set, non-empty, for the roles.
    stack_keys: ClassVar[tuple[str, ...]]
    # The command that lists its devices with their memory and health; empty: it has none.
    smi_command: ClassVar[tuple[str, ...]] = ()
    # Its stacks pin their whole Python environment in a wheel lock, installed --no-deps.
    wheel_lock: ClassVar[bool] = False
    # The role that checks its hosts' runtime (roles/<this>); none: nothing to check.
    runtime_role: ClassVar[str | None] = None
    # The vendor's device exporter roles/monitor deploys on its serving hosts (its package's
    # ``exporter``; which host runs it: acceldeploy.monitor.device_exporters); none: it has none.
    device_exporter: ClassVar[Exporter | None] = None
    # Its services own accelerator devices (a service on it lists them, device 0 when unset).
    has_devices: ClassVar[bool] = True
    # In a container its devices come through its own container runtime (the stack's
    # docker_run_args name it); False: one --device per device node.
    container_runtime_devices: ClassVar[bool] = False
    # Its engine runs shape buckets sized for each service (Gaudi's HPU graphs).
    shape_buckets: ClassVar[bool] = False
    # MiB: the least growth of a service's memory over a bench's rounds called a leak.
    leak_floor_mib: ClassVar[float] = 256.0

    @property
    def profile(self) -> dict[str, Any]:
        """Its numbers: its entry in data/platforms.yml (block size, device variable and nodes,
        memory budget, default env and flags, device groups, start timeout, its default
        runtime)."""
        entry: dict[str, Any] = load("platforms")[self.name]
        return entry

    def runs(self, stack: Mapping[str, Any]) -> bool:
        """The stack (an entry of versions/stacks.yml) is one of this platform's."""
        return stack.get("platform") == self.name

    @property
    def smi(self) -> str | None:
        """The device tool, by the name verify's host facts key its output under."""
        return self.smi_command[0] if self.smi_command else None

    def read_devices(self, smi_output: str) -> list[DeviceReading]:
        """The devices the output of ``smi_command`` lists."""
        return []

    def readiness_devices(self, devices: Sequence[int]) -> dict[str, list[Any]]:
        """A multi-node group's devices whose links its readiness gate checks, under the
        gate's key for this platform."""
        return {}

    # The stack matrix's cells (acceldeploy.planner.stackmatrix) that differ by platform.

    def torch_cell(self, entry: Mapping[str, Any]) -> str:
        return str(entry.get("torch") or "-")

    def device_torch_cell(self, entry: Mapping[str, Any]) -> str:
        return "-"

    def python_cell(self, entry: Mapping[str, Any]) -> str:
        python = str(entry.get("python") or "-")
        requires = entry.get("requires_python")
        return f"{python} ({requires})" if requires else python

    def bucketing_cell(self, entry: Mapping[str, Any]) -> str:
        return "-"
