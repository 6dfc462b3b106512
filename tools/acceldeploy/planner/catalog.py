"""The model catalog: geometry, size and the seeds' tuned flags per platform."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acceldeploy.data_files import load
from acceldeploy.planner.modelconfig import ModelArch, parse_model_arch


@dataclass(frozen=True)
class CatalogEntry:
    model: str
    params_b: float
    weight_bytes_per_param: float
    weights_gib_per_rank: dict[int, float]
    config: dict[str, Any]
    platforms: dict[str, dict[str, Any]] = field(default_factory=dict)

    def arch(self) -> ModelArch:
        return parse_model_arch(self.config, where=f"catalog entry {self.model}")

    def weights_gib(self, tp: int) -> float:
        """Weights per rank: measured where a seed logged it, else params x bytes / TP."""
        if tp in self.weights_gib_per_rank:
            return self.weights_gib_per_rank[tp]
        return self.params_b * 1e9 * self.weight_bytes_per_param / tp / (1 << 30)

    def tuned(self, platform: str) -> dict[str, Any]:
        return dict(self.platforms.get(platform, {}))


def model_ids() -> list[str]:
    return sorted(load("catalog"))


def find(model: str) -> CatalogEntry | None:
    raw = load("catalog").get(model)
    if raw is None:
        return None
    return CatalogEntry(
        model=model,
        params_b=float(raw["params_b"]),
        weight_bytes_per_param=float(raw.get("weight_bytes_per_param", 2)),
        weights_gib_per_rank={
            int(k): float(v) for k, v in raw.get("weights_gib_per_rank", {}).items()
        },
        config=raw["config"],
        platforms=raw.get("platforms", {}),
    )
