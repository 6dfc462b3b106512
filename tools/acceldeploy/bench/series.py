"""The driver's samples as numbers: memory per device (MiB) and vLLM's metrics over time,
each sample tagged with its phase. Raw smi text is parsed here, with the same parsers verify
and the runtime roles use (platforms/*/smi.py, tested on recorded real output), through the
platform's class."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy.platforms import for_name

# A platform without a device tool: the service's process tree, read by the driver in /proc.
CPU_DEVICE = "process tree (PSS)"


@dataclass(frozen=True)
class Sample:
    t: float
    phase: str
    memory_mib: dict[str, float]  # device -> MiB
    metrics: dict[str, float]


def device_memory(platform: str, devices: list[int], raw: dict[str, Any]) -> dict[str, float]:
    """One reading -> {device: MiB}: the service's devices where the platform has a device
    tool (its raw output), else its process tree's PSS."""
    behaviour = for_name(platform)
    if behaviour.smi_command:
        readings = behaviour.read_devices(raw.get("raw", ""))
        return {r.label: float(r.used_mib) for r in readings
                if r.index in devices and r.used_mib is not None}  # fmt: skip
    return {CPU_DEVICE: float(raw["pss_mib"])} if "pss_mib" in raw else {}


def load_samples(path: Path, platform: str, devices: list[int]) -> list[Sample]:
    samples = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        samples.append(
            Sample(
                t=float(row["t"]),
                phase=str(row["phase"]),
                memory_mib=device_memory(platform, devices, row.get("memory") or {}),
                metrics={k: float(v) for k, v in (row.get("metrics") or {}).items()},
            )
        )
    return samples


def phases_in_order(samples: Iterable[Sample]) -> list[str]:
    seen: list[str] = []
    for sample in samples:
        if sample.phase not in seen:
            seen.append(sample.phase)
    return seen


def phase_memory(samples: list[Sample], phase: str, device: str) -> float | None:
    """The median reading of `device` during `phase` (None when the phase has none)."""
    values = [s.memory_mib[device] for s in samples if s.phase == phase and device in s.memory_mib]
    return statistics.median(values) if values else None


def devices_of(samples: list[Sample]) -> list[str]:
    return sorted({d for s in samples for d in s.memory_mib})


def peak(samples: list[Sample], key: str) -> float | None:
    values = [s.metrics[key] for s in samples if key in s.metrics]
    return max(values) if values else None
