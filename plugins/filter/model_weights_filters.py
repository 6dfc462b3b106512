"""Ansible adapter over acceldeploy.weights (roles/model_weights): inputs checked on the
controller. The acceldeploy package is importable here because pyproject.toml installs it into
the controller's venv (editable); an AcceldeployError fails the task with its message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.downloads import weights
from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.roles import model_weights


def model_weights_fanout(
    infos: Sequence[Mapping[str, Any]],
    play_hosts: Sequence[str],
    all_hosts: Sequence[str] | None = None,
    inventory_hosts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """[each play host's model_weights_info] | model_weights_fanout(ansible_play_hosts,
    ansible_play_hosts_all, groups['all']): the fleet's fan-out (roles/model_weights.fanout)."""
    hosts = dict(zip([str(h) for h in play_hosts], plain(list(infos)), strict=True))
    return model_weights.fanout(hosts, [str(h) for h in all_hosts or ()],
                                [str(h) for h in inventory_hosts or ()])  # fmt: skip


def model_weights_listings(plan_result: Mapping[str, Any]) -> dict[str, Any]:
    """{directory: hub listing} from a seed's planned result, for its pullers."""
    return {p["dir"]: p["listing"] for p in plan_result.get("plans") or [] if p.get("listing")}


def model_weights_any_drift(states: Sequence[Mapping[str, Any]]) -> bool:
    return weights.any_drift(list(states))


def model_weights_summary_lines(
    plans: Sequence[Mapping[str, Any]], steady: bool = False
) -> list[str]:
    return weights.summary_lines(list(plans), bool(steady))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(
            model_weights_fanout,
            model_weights_listings,
            model_weights_any_drift,
            model_weights_summary_lines,
        )
