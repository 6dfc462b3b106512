"""The device tools' parsers under the name the runtime package has always given them: they
live in ``acceldeploy.platforms.smi``, beside the platforms whose devices they read."""

from __future__ import annotations

from acceldeploy.platforms.smi import (
    HlDevice,
    HlSmi,
    NpuChip,
    NpuSmi,
    parse_hccl_demo,
    parse_hl_smi,
    parse_hl_smi_modules,
    parse_hl_smi_topo,
    parse_npu_smi_info,
)

__all__ = [
    "HlDevice",
    "HlSmi",
    "NpuChip",
    "NpuSmi",
    "parse_hccl_demo",
    "parse_hl_smi",
    "parse_hl_smi_modules",
    "parse_hl_smi_topo",
    "parse_npu_smi_info",
]
