"""Ansible adapter over tools/acceldeploy/weights.py: inputs checked on the controller."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))

from acceldeploy import weights


def model_weights_specs(services: Any, require_revision: bool = True) -> list[dict[str, Any]]:
    """The models of one host's acceldeploy_services; bad input fails naming the variable."""
    try:
        return [s.to_dict() for s in weights.model_specs(services, bool(require_revision))]
    except weights.WeightsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def model_weights_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    try:
        settings = weights.Settings.check(raw)
    except weights.WeightsError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return {
        "strategy": settings.strategy,
        "seed_host": settings.seed_host,
        "shared_storage": settings.shared_storage,
        "root": settings.root,
        "verify": settings.verify,
    }


def model_weights_fanout(
    infos: Sequence[Mapping[str, Any]], play_hosts: Sequence[str]
) -> dict[str, Any]:
    """Per host of the play: hub / pull / verify / serve model lists and its seed."""
    try:
        plan: dict[str, Any] = weights.fanout(
            dict(zip(play_hosts, infos, strict=True)), list(play_hosts)
        )
        return plan
    except (weights.WeightsError, KeyError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from None


def model_weights_listings(plan_result: Mapping[str, Any]) -> dict[str, Any]:
    """{directory: hub listing} from a seed's planned result, for its pullers."""
    return {p["dir"]: p["listing"] for p in plan_result.get("plans") or [] if p.get("listing")}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "model_weights_specs": model_weights_specs,
            "model_weights_settings": model_weights_settings,
            "model_weights_fanout": model_weights_fanout,
            "model_weights_listings": model_weights_listings,
        }
