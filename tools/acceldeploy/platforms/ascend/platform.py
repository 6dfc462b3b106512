"""Huawei Ascend: NPUs read with ``npu-smi info``, vLLM with the vllm-ascend plugin on CANN."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.platforms.ascend.exporter import NPU
from acceldeploy.platforms.ascend.smi import parse_npu_smi_info
from acceldeploy.platforms.base import DeviceReading, PlatformBehaviour


class AscendPlatform(PlatformBehaviour):
    name = "ascend"
    stack_keys = (
        "python",
        "env_name",
        "vllm",
        "engine_options",
        "vllm_ref",
        "vllm_repo",
        "vllm_ascend",
        "vllm_ascend_ref",
        "vllm_ascend_repo",
        "torch",
        "torch_npu",
        "ray",
        "cann",
        "cann_compatible_drivers",
        "env_scripts",
    )
    smi_command = ("npu-smi", "info")
    runtime_role = "ascend_runtime"
    device_exporter = NPU

    def read_devices(self, smi_output: str) -> list[DeviceReading]:
        """Every chip, by its NPU id; its HBM is the memory the services use."""
        return [
            DeviceReading(chip.npu, f"npu{chip.npu}", chip.hbm_used_mb, chip.health)
            for chip in parse_npu_smi_info(smi_output).chips
        ]

    def readiness_devices(self, devices: Sequence[int]) -> dict[str, list[Any]]:
        return {"npus": list(devices)}

    def device_torch_cell(self, entry: Mapping[str, Any]) -> str:
        return f"torch-npu {entry['torch_npu']}"
