"""host_tuning's contract: every host_tuning_* variable checked for type and range, no host
needed (what needs the host is planned by hosttuning.plan with the probe's view)."""

from __future__ import annotations

from typing import Any

from acceldeploy import hosttuning
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles.contract import Contract

ROLE = "host_tuning"
# Each read as host_tuning_<name>.
INPUTS = (
    "platform", "profiles", "kernel_args_enabled", "kernel_args", "kernel_args_conditional",
    "kernel_args_extra", "grub_dropin", "grub_cfg", "sysctls_enabled", "sysctls",
    "sysctls_extra", "sysctl_file", "hugepages_enabled", "hugepages",
    "hugepages_max_percent", "hugepages_file", "governor_enabled", "governor",
    "governor_disable_units", "bios_audit_enabled", "bios_redfish_endpoint",
    "bios_redfish_system", "bios_redfish_attributes", "reboot", "reboot_batch",
    "reboot_max_fail_percentage", "reboot_timeout", "reboot_services",
)  # fmt: skip


def inputs(scope: Scope) -> dict[str, Any]:
    """What the decisions need, in one mapping; of the Redfish credentials, only whether both
    are set."""
    credentials = all(
        len(scope[f"{ROLE}_bios_redfish_{part}"]) > 0 for part in ("username", "password")
    )
    return {**scope.fields(ROLE, INPUTS), "bios_redfish_credentials": credentials}


def plan(scope: Scope) -> dict[str, Any]:
    given = inputs(scope)
    return {
        "host_tuning_inputs": given,
        "host_tuning_settings": hosttuning.settings(given).to_dict(),
    }


def footprint(scope: Scope) -> dict[str, list[str]]:
    return hosttuning.state_spec(scope[f"{ROLE}_plan"])


CONTRACT = Contract(
    ROLE, plan, state_inputs=lambda scope: scope[f"{ROLE}_inputs"], footprint=footprint
)
