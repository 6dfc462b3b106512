"""Whether a host should reboot, and after the reboot whether /proc/cmdline carries the
kernel arguments (where that can be known: not in a container)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.hosttuning import kernelargs


def changed(result: Any) -> bool:
    """Whether a registered result (or a list of them, or a loop's) reports a change."""
    if isinstance(result, Sequence) and not isinstance(result, str):
        return any(changed(r) for r in result)
    if not isinstance(result, Mapping):
        return False
    if result.get("results"):
        return any(changed(r) for r in result["results"])
    return bool(result.get("changed")) and not result.get("skipped")


def reboot_reasons(
    the_plan: Mapping[str, Any], kernel_file_results: Any, bios_staged: Sequence[str] = ()
) -> list[str]:
    """Why this host should reboot (empty: it should not).

    ``kernel_file_results``: the registered results of the tasks writing the kernel-argument
    file (or a bool): in a container, where /proc/cmdline is the machine's, a change there
    (or an earlier run's change the host has not booted since) is the reason.
    """
    kernel_file_changed = (
        kernel_file_results
        if isinstance(kernel_file_results, bool)
        else changed(kernel_file_results)
    )
    reasons = []
    kernel = the_plan.get("kernel") or {}
    if kernel.get("enabled"):
        if not kernel.get("cmdline_applicable"):
            if kernel_file_changed or kernel.get("changed_since_boot"):
                reasons.append(
                    "kernel arguments changed since this host booted (container: its kernel "
                    "is the machine's, the reboot restarts the container only)"
                )
        elif kernel.get("missing") and (kernel.get("grub") or {}).get("bootloader_found"):
            reasons.append("kernel arguments not in /proc/cmdline: " + " ".join(kernel["missing"]))
    if bios_staged:
        reasons.append("BIOS settings staged through Redfish: " + ", ".join(bios_staged))
    return reasons


def cmdline_check(the_plan: Mapping[str, Any], probe: Mapping[str, Any]) -> dict[str, Any]:
    """After a reboot: does /proc/cmdline carry the arguments (where that can be known)?"""
    kernel = the_plan.get("kernel") or {}
    if not kernel.get("enabled"):
        return {"applicable": False, "missing": [], "message": "kernel arguments not managed"}
    if not kernel.get("cmdline_applicable"):
        tech = (the_plan.get("host") or {}).get("tech") or "container"
        return {
            "applicable": False,
            "missing": [],
            "message": f"not applicable ({tech}): /proc/cmdline is the machine's kernel",
        }
    gone = kernelargs.missing(kernel.get("args") or [], str(probe.get("cmdline") or ""))
    grub = kernel.get("grub") or {}
    return {
        "applicable": True,
        "missing": gone,
        "message": "all kernel arguments in /proc/cmdline"
        if not gone
        else f"after the reboot /proc/cmdline still lacks {' '.join(gone)}: check that "
        f"{grub.get('cfg_path')} is the config GRUB boots (set host_tuning_grub_cfg) and that "
        f"{grub.get('path')} is not overridden by a later file",
    }
