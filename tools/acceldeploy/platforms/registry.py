"""The platforms by name (a host's ``acceldeploy_platform``)."""

from __future__ import annotations

from acceldeploy.errors import AcceldeployError
from acceldeploy.platforms.ascend.platform import AscendPlatform
from acceldeploy.platforms.base import PlatformBehaviour
from acceldeploy.platforms.cpu.platform import CpuPlatform
from acceldeploy.platforms.gaudi.platform import GaudiPlatform

# In the order messages list them.
PLATFORMS: tuple[PlatformBehaviour, ...] = (AscendPlatform(), GaudiPlatform(), CpuPlatform())
_BY_NAME = {platform.name: platform for platform in PLATFORMS}


def known_names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def for_name(name: str) -> PlatformBehaviour:
    """The platform called ``name``; an error naming the variable and the known names."""
    platform = _BY_NAME.get(name)
    if platform is None:
        raise AcceldeployError(
            f"acceldeploy_platform {name!r} is unknown; set it to one of {', '.join(known_names())}"
        )
    return platform


def find(name: str) -> PlatformBehaviour | None:
    """The platform called ``name``; none for an unknown or empty name (where the caller has
    nothing to ask of it, or its own check refuses the name)."""
    return _BY_NAME.get(name)
