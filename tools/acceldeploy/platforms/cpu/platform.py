"""The CPU (the lab): no devices, vLLM's CPU build from the stack's wheel lock."""

from __future__ import annotations

from acceldeploy.platforms.base import PlatformBehaviour


class CpuPlatform(PlatformBehaviour):
    name = "cpu"
    stack_keys = ("python", "vllm", "engine_options", "lock", "ray")
    wheel_lock = True
    has_devices = False
    leak_floor_mib = 64.0
