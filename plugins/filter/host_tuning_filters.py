"""Ansible adapter over tools/acceldeploy/hosttuning/ for roles/host_tuning: the role's
templates and tasks only print what these return; bad input fails naming the variable.

``acceldeploy`` is imported from the controller's virtualenv (pyproject.toml's editable
install), not from a path relative to this file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy import hosttuning
from acceldeploy.inventory.ansible_adapter import filters


def host_tuning_plan(
    probe: Mapping[str, Any], inputs: Mapping[str, Any], facts: Mapping[str, Any]
) -> dict[str, Any]:
    """probe | host_tuning_plan(host_tuning_inputs, ansible_facts): what the role will do."""
    return hosttuning.plan(inputs, facts, probe)


def host_tuning_reboot_reasons(
    plan: Mapping[str, Any], kernel_file_results: Any, bios_staged: Sequence[str] = ()
) -> list[str]:
    """plan | host_tuning_reboot_reasons([registered kernel-file results], staged BIOS keys)."""
    return hosttuning.reboot_reasons(plan, kernel_file_results, list(bios_staged or []))


def host_tuning_cmdline_check(plan: Mapping[str, Any], probe: Mapping[str, Any]) -> dict[str, Any]:
    return hosttuning.cmdline_check(plan, probe)


def host_tuning_bios_audit(plan: Mapping[str, Any], probe: Mapping[str, Any]) -> dict[str, Any]:
    return hosttuning.bios_audit(plan, probe)


def host_tuning_redfish_changes(
    wanted: Mapping[str, Any], bios: Mapping[str, Any], settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return hosttuning.redfish_changes(wanted, bios, settings)


def host_tuning_redfish_settings_url(bios: Mapping[str, Any], endpoint: str, bios_url: str) -> str:
    return hosttuning.redfish_settings_url(endpoint, bios_url, bios)


def host_tuning_summary(
    plan: Mapping[str, Any],
    outcome: Mapping[str, Any],
    probe_after: Mapping[str, Any],
    reboot: Mapping[str, Any] | None = None,
) -> list[str]:
    return hosttuning.summary(plan, outcome, probe_after, reboot)


def host_tuning_steady_outcome(
    outcome: Mapping[str, Any], reboot: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return hosttuning.steady_outcome(outcome, reboot or {})


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(
            host_tuning_plan,
            host_tuning_reboot_reasons,
            host_tuning_cmdline_check,
            host_tuning_bios_audit,
            host_tuning_redfish_changes,
            host_tuning_redfish_settings_url,
            host_tuning_summary,
            host_tuning_steady_outcome,
        )
