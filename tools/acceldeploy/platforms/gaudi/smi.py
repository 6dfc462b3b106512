"""The parsers of Gaudi's device tools: ``hl-smi`` (default table, ``-Q index,module_id -f
csv``, ``topo -c -N``) and hccl_demo.

Tested against recorded real output (tests/data/recorded); used by the platform's class (it
reads its devices with it), its runtime check and ``acceldeploy.siteinit``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError


@dataclass(frozen=True)
class HlDevice:
    index: int
    name: str
    bus_id: str
    memory_used_mib: int | None
    memory_total_mib: int | None


@dataclass(frozen=True)
class HlSmi:
    smi_version: str
    driver: str
    devices: tuple[HlDevice, ...]

    @property
    def driver_version(self) -> str:
        """1.22.1-97ec1a4 -> 1.22.1"""
        return self.driver.split("-", 1)[0]

    @property
    def firmware(self) -> str:
        """hl-1.22.1-fw-61.4.2.1 -> 61.4.2.1"""
        match = re.search(r"fw-([\d.]+)", self.smi_version)
        return match.group(1) if match else ""


def parse_hl_smi(text: str) -> HlSmi:
    smi = re.search(r"HL-SMI Version:\s*(\S+)", text)
    driver = re.search(r"^\|\s*Driver Version:\s*(\S+)", text, re.MULTILINE)
    if not smi or not driver:
        raise AcceldeployError("not hl-smi output: no 'HL-SMI Version' / 'Driver Version' header")
    devices: list[HlDevice] = []
    lines = text.splitlines()
    row = re.compile(
        r"^\|\s+(\d+)\s+(HL-\S+)\s.*?\|\s*([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)"
    )
    for number, line in enumerate(lines):
        found = row.match(line)
        if not found:
            continue
        memory = None
        if number + 1 < len(lines):
            memory = re.search(r"(\d+)MiB\s*/\s*(\d+)MiB", lines[number + 1])
        devices.append(
            HlDevice(
                index=int(found.group(1)),
                name=found.group(2),
                bus_id=found.group(3).lower(),
                memory_used_mib=int(memory.group(1)) if memory else None,
                memory_total_mib=int(memory.group(2)) if memory else None,
            )
        )
    if not devices:
        raise AcceldeployError("hl-smi lists no Gaudi device")
    return HlSmi(smi_version=smi.group(1), driver=driver.group(1), devices=tuple(devices))


def parse_hl_smi_modules(text: str) -> dict[int, int]:
    """``hl-smi -Q index,module_id -f csv`` -> {index: module_id}."""
    found: dict[int, int] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.lower().startswith("index"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            found[int(parts[0])] = int(parts[1])
    if not found:
        raise AcceldeployError("hl-smi -Q index,module_id -f csv printed no index, module_id row")
    return found


def parse_hl_smi_topo(text: str) -> dict[int, dict[str, Any]]:
    """``hl-smi topo -c -N`` -> {module_id: {cpus, numa}}. The CPU affinity may hold
    ``0-39, 80-119`` (a comma and a space), so the first field is the module and the last
    the NUMA node."""
    found: dict[int, dict[str, Any]] = {}
    for raw in text.splitlines():
        fields = raw.split()
        if len(fields) < 3 or not fields[0].isdigit() or not fields[-1].isdigit():
            continue
        cpus = re.sub(r"\s*,\s*", ",", " ".join(fields[1:-1]))
        found[int(fields[0])] = {"cpus": cpus, "numa": int(fields[-1])}
    if not found:
        raise AcceldeployError("hl-smi topo -c -N printed no modID row")
    return found


def parse_hccl_demo(text: str) -> dict[str, Any]:
    """hccl_demo's ``[BENCHMARK]`` block: the collective, NW and algorithm bandwidth (GB/s)."""
    bench = re.findall(r"\[BENCHMARK\]\s+(hccl\w+\([^)]*\))", text)
    network = re.findall(r"NW Bandwidth\s*:\s*([\d.]+)\s*GB/s", text)
    algo = re.findall(r"Algo Bandwidth\s*:\s*([\d.]+)\s*GB/s", text)
    if not network or not algo:
        raise AcceldeployError("hccl_demo printed no '[BENCHMARK] NW Bandwidth : <n> GB/s' line")
    return {
        "benchmark": bench[-1] if bench else "",
        "nw_bandwidth_gbps": float(network[-1]),
        "algo_bandwidth_gbps": float(algo[-1]),
    }
