"""Ansible adapter over tools/acceldeploy: the roles get argv/env from the tested core."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from acceldeploy.errors import AcceldeployError
from acceldeploy.render import render_host


def acceldeploy_launches(
    platform: str, services: list[dict[str, Any]], models_root: str = "/models"
) -> list[dict[str, Any]]:
    """Every service of a host as {name, argv, env, ...}; bad input fails naming the variable."""
    hostvars = {
        "acceldeploy_platform": platform,
        "acceldeploy_services": services,
        "acceldeploy_models_root": models_root,
    }
    try:
        return [launch.to_dict() for launch in render_host(hostvars)]
    except AcceldeployError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"acceldeploy_launches": acceldeploy_launches}
