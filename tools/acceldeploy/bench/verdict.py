"""Leak or cache, from repeated identical rounds (not from a reset).

After round 1 the caches hold what this work needs: that reading is the plateau. A cache
stops growing, so rounds 2..R stay within the noise band of it ("bounded"); a leak keeps
growing with the same work ("growing", with MiB per round). The noise band is measured on
the service itself: the spread of its idle readings before the load, widened by a floor per
platform (allocator and page-cache jitter the idle window is too short to show; README "Bench"
says how the floors were measured)."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from acceldeploy.bench.series import Sample, phase_memory
from acceldeploy.platforms import for_name

IDLE_WIDEN = 4.0  # x the idle readings' spread (max - min)


@dataclass(frozen=True)
class Verdict:
    state: str  # bounded | growing | not judged
    device: str
    band_mib: float
    plateau_mib: float | None
    rounds_mib: list[float | None]
    per_round_mib: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def noise_band(samples: list[Sample], device: str, platform: str) -> float:
    idle = [s.memory_mib[device] for s in samples if s.phase == "ready" and device in s.memory_mib]
    spread = (max(idle) - min(idle)) if len(idle) >= 2 else 0.0
    return max(for_name(platform).leak_floor_mib, IDLE_WIDEN * spread)


def judge(samples: list[Sample], device: str, platform: str, after_phases: list[str]) -> Verdict:
    """`after_phases`: the idle phase after each identical round, in order."""
    band = noise_band(samples, device, platform)
    rounds = [phase_memory(samples, phase, device) for phase in after_phases]
    if len(rounds) < 2 or any(r is None for r in rounds):
        return Verdict("not judged", device, band, rounds[0] if rounds else None, rounds, None,
                       "needs 2 or more rounds with memory readings after each")  # fmt: skip
    values = [float(r) for r in rounds if r is not None]
    plateau = values[0]
    growth = values[-1] - plateau
    per_round = growth / (len(values) - 1)
    rising = all(b >= a - band / 2 for a, b in itertools.pairwise(values))
    if growth > band and rising:
        state = "growing"
        reason = (
            f"{device} grew {growth:.0f} MiB over rounds 2..{len(values)} of identical work "
            f"({per_round:.1f} MiB per round, noise band {band:.0f} MiB)"
        )
    else:
        state = "bounded"
        reason = (
            f"{device} stayed within {band:.0f} MiB of the plateau after round 1 "
            f"({plateau:.0f} MiB; change over rounds 2..{len(values)}: {growth:+.0f} MiB)"
        )
    return Verdict(state, device, round(band, 1), round(plateau, 1),
                   [round(v, 1) for v in values], round(per_round, 2), reason)  # fmt: skip


def spread(values: list[float]) -> float:
    """Half the range of a figure across rounds (the measured run-to-run noise)."""
    return (max(values) - min(values)) / 2 if len(values) >= 2 else 0.0


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
