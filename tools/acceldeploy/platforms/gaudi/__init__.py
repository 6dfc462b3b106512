"""Intel Gaudi, whole: its class (``platform``), the parsers of hl-smi and hccl_demo
(``smi``), its runtime check (``runtime``: driver against the image's software, the habana
container runtime, modules, NUMA, hccl_demo) and Intel's metric exporter (``exporter``)."""

from __future__ import annotations

from acceldeploy.platforms.gaudi.platform import GaudiPlatform

__all__ = ["GaudiPlatform"]
