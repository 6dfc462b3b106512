"""One class per platform, as vLLM's ``vllm/platforms``: what differs in behaviour between
Ascend, Gaudi and the CPU lab, each in its own module, found by name with ``for_name``.

- ``base``: ``PlatformBehaviour``, what every platform answers and the shared answers.
- ``ascend``, ``gaudi``, ``cpu``: one subclass each.
- ``registry``: ``for_name`` (refusing an unknown ``acceldeploy_platform``), ``find`` (none
  for an unknown one), ``known_names``.
- ``smi``: the parsers of the device tools' output (``npu-smi info``, ``hl-smi``, hccl_demo).

The platforms' numbers are data (data/platforms.yml); ``acceldeploy.planner.platforms`` joins
them with the host's stack into a ``Platform``, whose ``behaviour`` is its class here. This
package imports nothing of acceldeploy but its errors, so every layer above may use it.
"""

from __future__ import annotations

from acceldeploy.platforms.base import HEALTHY, DeviceReading, PlatformBehaviour
from acceldeploy.platforms.registry import PLATFORMS, find, for_name, known_names

__all__ = [
    "HEALTHY",
    "PLATFORMS",
    "DeviceReading",
    "PlatformBehaviour",
    "find",
    "for_name",
    "known_names",
]
