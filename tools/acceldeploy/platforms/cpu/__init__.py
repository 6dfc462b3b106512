"""The CPU (the lab), whole: its class (``platform``). It has no devices, no runtime check and
no device exporter."""

from __future__ import annotations

from acceldeploy.platforms.cpu.platform import CpuPlatform

__all__ = ["CpuPlatform"]
