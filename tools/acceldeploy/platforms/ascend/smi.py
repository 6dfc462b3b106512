"""The parser of ``npu-smi info``, Ascend's device tool.

Tested against recorded real output (tests/data/recorded); used by the platform's class (it
reads its devices with it), its runtime check and ``acceldeploy.siteinit``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from acceldeploy.errors import AcceldeployError


@dataclass(frozen=True)
class NpuChip:
    npu: int
    name: str
    health: str
    chip: int
    device: int
    bus_id: str
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None


@dataclass(frozen=True)
class NpuSmi:
    version: str
    chips: tuple[NpuChip, ...]

    @property
    def devices(self) -> list[int]:
        return sorted({c.device for c in self.chips})


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _npu_chip(first: list[str], cells: list[str], head: list[str]) -> NpuChip:
    """One chip from its two table rows: ``first`` (NPU Name | Health | ...) and ``cells``
    (Chip [Device] | Bus-Id | memory), ``head`` the words of the latter's first cell."""
    npu_id, name = int(first[0].split()[0]), first[0].split()[1]
    chip = int(head[0])
    device = int(head[1]) if len(head) > 1 and head[1].isdigit() else npu_id
    pairs = [(int(a), int(b)) for a, b in re.findall(r"(\d+)\s*/\s*(\d+)", cells[2])]
    memory = pairs[0] if pairs else (None, None)
    hbm = pairs[1] if len(pairs) > 1 else (None, None)
    return NpuChip(
        npu=npu_id,
        name=name,
        health=first[1],
        chip=chip,
        device=device,
        bus_id=cells[1],
        memory_used_mb=memory[0],
        memory_total_mb=memory[1],
        hbm_used_mb=hbm[0],
        hbm_total_mb=hbm[1],
    )


def parse_npu_smi_info(text: str) -> NpuSmi:
    """``npu-smi info``: 910B layout (NPU/Name, Chip/Bus-Id, HBM column) and 310P layout
    (Chip Device column, no HBM). The logical device id is the Device column when present,
    else the NPU id (chip 0)."""
    match = re.search(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", text)
    if not match:
        raise AcceldeployError("not npu-smi info output: no 'npu-smi <version>' header")
    version = match.group(2)
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    chips: list[NpuChip] = []
    pending: list[str] | None = None
    for line in lines:
        if "Process id" in line or "Process name" in line:
            break
        cells = _cells(line)
        if len(cells) < 3:
            continue
        head = cells[0].split()
        if pending is None:
            if len(head) >= 2 and head[0].isdigit() and not head[1].isdigit():
                pending = cells
            continue
        first = pending
        pending = None
        if not head or not head[0].isdigit():
            continue
        chips.append(_npu_chip(first, cells, head))
    if not chips:
        raise AcceldeployError("npu-smi info lists no NPU")
    return NpuSmi(version=version, chips=tuple(chips))
