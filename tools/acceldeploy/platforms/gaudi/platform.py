"""Intel Gaudi: HPUs read with ``hl-smi``, vLLM in the stack's container image."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.platforms.base import HEALTHY, DeviceReading, PlatformBehaviour
from acceldeploy.platforms.gaudi.exporter import GAUDI
from acceldeploy.platforms.gaudi.smi import parse_hl_smi


class GaudiPlatform(PlatformBehaviour):
    name = "gaudi"
    stack_keys = ("software", "image", "vllm", "engine_options", "docker_run_args")
    smi_command = ("hl-smi",)
    runtime_role = "gaudi_runtime"
    device_exporter = GAUDI
    container_runtime_devices = True
    shape_buckets = True

    def read_devices(self, smi_output: str) -> list[DeviceReading]:
        """Every device hl-smi lists, healthy: its table has no health column."""
        return [
            DeviceReading(device.index, f"hpu{device.index}", device.memory_used_mib, HEALTHY)
            for device in parse_hl_smi(smi_output).devices
        ]

    def readiness_devices(self, devices: Sequence[int]) -> dict[str, list[Any]]:
        return {"hpus": [str(d) for d in devices]}

    # Python, torch and Ray are the image's: the stack records what the image holds.

    def torch_cell(self, entry: Mapping[str, Any]) -> str:
        return "-"

    def device_torch_cell(self, entry: Mapping[str, Any]) -> str:
        return f"Habana PyTorch {entry.get('torch', '?')} (the image's)"

    def python_cell(self, entry: Mapping[str, Any]) -> str:
        return f"{entry.get('python') or '-'} (the image's)"

    def bucketing_cell(self, entry: Mapping[str, Any]) -> str:
        names = entry.get("bucketing") or {}
        return f"{names.get('prompt_len', 'VLLM_PROMPT_SEQ_BUCKET')}_*"
