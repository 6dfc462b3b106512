"""One class per platform, as vLLM's ``vllm/platforms``: what differs in behaviour between
Ascend, Gaudi and the CPU lab, each in its own module, found by name with ``for_name``.

- ``base``: ``PlatformBehaviour``, what every platform answers and the shared answers.
- ``ascend``, ``gaudi``, ``cpu``: one package each, the platform whole: its class
  (``platform``), its device tool's parsers (``smi``), its runtime check (``runtime``) and its
  device exporter (``exporter``), where it has them.
- ``registry``: ``for_name`` (refusing an unknown ``acceldeploy_platform``), ``find`` (none
  for an unknown one), ``known_names``.
- What the platforms' parts share: ``probe`` (the runtime checks' verdict and reading a
  role's probe), ``versions``, ``image`` (judging a stack's container image) and ``exporter``
  (what a device exporter declares).

The platforms' numbers are data (data/platforms.yml); ``acceldeploy.planner.platforms`` joins
them with the host's stack into a ``HostPlatform``, whose ``behaviour`` is its class here. The
classes and what they use import nothing of acceldeploy but its errors and data files, so every
layer above may use them; a platform's runtime check sits above the planner, whose stacks its
refusals name (pyproject.toml's import contracts place each part).
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
