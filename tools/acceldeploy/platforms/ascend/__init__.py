"""Huawei Ascend, whole: its class (``platform``), the parser of ``npu-smi info`` (``smi``),
its runtime check (``runtime``: driver, firmware, CANN, NPUs) and MindCluster's npu-exporter
(``exporter``)."""

from __future__ import annotations

from acceldeploy.platforms.ascend.platform import AscendPlatform

__all__ = ["AscendPlatform"]
