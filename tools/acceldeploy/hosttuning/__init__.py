"""Host tuning decisions: what roles/host_tuning sets on a host, what it can apply live,
what waits for a reboot, what the BIOS audit finds, and the summary it prints.

Inputs are the role's variables (``host_tuning_*``, gathered in roles/host_tuning/vars/main.yml
as ``host_tuning_inputs``), a few Ansible facts, and what the read-only probe module saw on the
host. Bad input raises AcceldeployError naming the variable, before any host is changed.

One module per concern; everything is re-exported here (``hosttuning.plan(...)``):

- :mod:`.inputs`: type and range checks of every variable, no host needed (tasks/check.yml)
- :mod:`.planning`: the plan of one host from the settings, its facts and the probe
- :mod:`.reboot`: why a host should reboot, and /proc/cmdline after the reboot
- :mod:`.bios`: the BIOS audit (named checks) and the Redfish attributes to stage
- :mod:`.report`: the summary lines
- :mod:`.kernelargs` (used by the others, not re-exported): kernel command-line arguments:
  parsed, compared with /proc/cmdline, and the GRUB change planned
"""

from __future__ import annotations

from acceldeploy.hosttuning.bios import (
    AUDIT_CHECKS,
    DEEP_CSTATE_LATENCY_US,
    CpuView,
    bios_audit,
    redfish_changes,
    redfish_settings_url,
    system_info,
)
from acceldeploy.hosttuning.inputs import (
    CPUFREQ_GOVERNORS,
    INPUT_PREFIX,
    STEPS,
    SYSCTL_KEY,
    UNIT_NAME,
    Conditional,
    Settings,
    as_bool,
    as_int,
    as_list,
    as_mapping,
    as_path,
    as_str,
    settings,
    sysctl_map,
    unit_names,
)
from acceldeploy.hosttuning.planning import (
    CONTAINER_TECH,
    GOVERNOR_ARG,
    HostView,
    changed_since_boot,
    gib,
    host_view,
    hugepages_check,
    plan,
    state_spec,
)
from acceldeploy.hosttuning.reboot import changed, cmdline_check, reboot_reasons
from acceldeploy.hosttuning.report import SUMMARY_LINES, steady_outcome, summary

__all__ = [
    "AUDIT_CHECKS",
    "CONTAINER_TECH",
    "CPUFREQ_GOVERNORS",
    "DEEP_CSTATE_LATENCY_US",
    "GOVERNOR_ARG",
    "INPUT_PREFIX",
    "STEPS",
    "SUMMARY_LINES",
    "SYSCTL_KEY",
    "UNIT_NAME",
    "Conditional",
    "CpuView",
    "HostView",
    "Settings",
    "as_bool",
    "as_int",
    "as_list",
    "as_mapping",
    "as_path",
    "as_str",
    "bios_audit",
    "changed",
    "changed_since_boot",
    "cmdline_check",
    "gib",
    "host_view",
    "hugepages_check",
    "plan",
    "reboot_reasons",
    "redfish_changes",
    "redfish_settings_url",
    "settings",
    "state_spec",
    "steady_outcome",
    "summary",
    "sysctl_map",
    "system_info",
    "unit_names",
]
