"""The per-host summary printed at the end of the play: one line (or two) per concern, built
from the plan, what this run registered (``host_tuning_outcome``), a probe after the changes,
and the reboot's result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.hosttuning.reboot import changed


@dataclass(frozen=True)
class Run:
    """What one host's summary lines are built from."""

    plan: Mapping[str, Any]
    outcome: Mapping[str, Any]
    probe_after: Mapping[str, Any]
    reboot: Mapping[str, Any]

    @property
    def host(self) -> Mapping[str, Any]:
        return self.plan.get("host") or {}

    @property
    def check_mode(self) -> bool:
        return bool(self.outcome.get("check_mode"))

    @property
    def verb(self) -> str:
        return "would change" if self.check_mode else "changed"

    def state(self, key: str) -> str:
        """'changed' / 'would change' when the outcome's ``key`` changed, else 'unchanged'."""
        return self.verb if changed(self.outcome.get(key)) else "unchanged"


def platform_lines(run: Run) -> list[str]:
    host = run.host
    where = ", ".join(
        x
        for x in (
            run.plan.get("platform"),
            host.get("distribution"),
            host.get("kernel"),
            host.get("tech") and f"{host['tech']}",
        )
        if x
    )
    return [f"platform {where}" + (" (check mode: nothing was changed)" if run.check_mode else "")]


def kernel_lines(run: Run) -> list[str]:
    kernel = run.plan.get("kernel") or {}
    if not kernel.get("enabled"):
        return ["kernel args: not managed (host_tuning_kernel_args_enabled: false)"]
    grub = kernel.get("grub") or {}
    text = (
        f"kernel args: {' '.join(kernel.get('args') or [])} in {grub.get('path')} "
        f"({run.state('kernel_file')})"
    )
    if kernel.get("dropped"):
        text += "; skipped " + ", ".join(f"{d['arg']} ({d['reason']})" for d in kernel["dropped"])
    if not kernel.get("regenerate"):
        text += "; boot config not regenerated: " + (
            "container, no boot loader of its own"
            if run.host.get("container")
            else f"no GRUB config at {grub.get('cfg_path')}"
        )
    elif changed(run.outcome.get("kernel_regenerate")):
        text += f"; {grub.get('cfg_path')} regenerated"
    return [text]


def sysctl_lines(run: Run) -> list[str]:
    sysctls = run.plan.get("sysctls") or {}
    if not sysctls.get("enabled"):
        return ["sysctls: none managed"]
    live_now = run.probe_after.get("sysctl") or {}
    persist = sysctls.get("persist") or {}
    off = {k: live_now.get(k) for k, v in persist.items() if str(live_now.get(k)) != v}
    text = f"sysctls: {', '.join(f'{k}={v}' for k, v in persist.items())} in {sysctls.get('file')}"
    text += f" ({run.state('sysctls')})"
    if off:
        live = "not applied live" if not sysctls.get("live") else "live value differs"
        text += f"; {live} ({run.host.get('why_not_live') or 'kernel refused'}): " + ", ".join(
            f"{k} is {v}" for k, v in off.items()
        )
    else:
        text += "; in effect"
    for key, why in (sysctls.get("unavailable") or {}).items():
        text += f"; {key} skipped ({why})"
    return [text]


def hugepages_lines(run: Run) -> list[str]:
    huge = run.plan.get("hugepages") or {}
    if not huge.get("enabled"):
        return ["hugepages: not managed (count 0 or host_tuning_hugepages_enabled: false)"]
    now = int((run.probe_after.get("meminfo") or {}).get("HugePages_Total") or 0)
    text = (
        f"hugepages: {huge['count']} x {huge['size_kb']} kB = {huge['total']} of "
        f"{huge['memory']} in {huge['file']} ({run.state('hugepages')})"
    )
    if now == huge["count"]:
        text += "; live"
    elif not huge.get("live"):
        text += f"; not applied live ({run.host.get('why_not_live')}): {now} now"
    else:
        text += f"; only {now} allocated live (memory fragmented): the next boot allocates them"
    return [text]


def governor_lines(run: Run) -> list[str]:
    gov = run.plan.get("governor") or {}
    if not gov.get("enabled"):
        return []
    policies = ((run.probe_after.get("cpu") or {}).get("cpufreq") or {}).get("policies") or {}
    governors = sorted({str(p.get("governor")) for p in policies.values()})
    text = f"governor: {gov.get('name')}"
    if gov.get("live"):
        text += f" live on {len(policies)} policies ({', '.join(governors)})"
        if changed(run.outcome.get("governor")):
            text += f", {run.verb}"
    else:
        text += f" not set live ({gov.get('why_not_live')})"
    if gov.get("persistent"):
        text += f"; persistent via {gov['persistent']}"
    if changed(run.outcome.get("governor_units")):
        text += f"; disabled {', '.join(gov.get('disable_units') or [])}"
    return [text]


def reboot_lines(run: Run) -> list[str]:
    reasons = list(run.outcome.get("reboot_reasons") or [])
    if run.reboot.get("rebooted"):
        check_text = (run.reboot.get("cmdline") or {}).get("message") or ""
        return [f"reboot: done ({'; '.join(reasons)}); cmdline check: {check_text}"]
    if reasons:
        hint = (
            "the rolling reboot did not run (check mode or --skip-tags)"
            if (run.plan.get("reboot") or {}).get("enabled")
            else "set host_tuning_reboot: true to reboot rolling, or reboot it yourself"
        )
        return [f"reboot: pending - {'; '.join(reasons)} - {hint}"]
    return ["reboot: not needed"]


def bios_audit_lines(run: Run) -> list[str]:
    audit = run.outcome.get("bios_audit") or {}
    if not audit:
        return []
    findings = audit.get("findings") or []
    if not audit.get("applicable"):
        return [
            f"bios audit: not applicable ({audit.get('why')}); "
            f"seen on the machine underneath ({len(findings)}): "
            + ("; ".join(f["item"] for f in findings) or "none")
        ]
    if findings:
        return [
            f"bios audit: {len(findings)} deviation(s): "
            + "; ".join(f"{f['item']}: {f['found']} -> {f['fix']}" for f in findings)
        ]
    return [f"bios audit: as recommended ({audit.get('system')})"]


def redfish_lines(run: Run) -> list[str]:
    redfish = run.outcome.get("redfish") or {}
    if not redfish:
        return []
    patch = (
        f"{run.verb} {', '.join(sorted(redfish.get('patch') or {}))}; "
        if redfish.get("patch")
        else ""
    )
    staged = (
        f"staged until reboot: {', '.join(redfish.get('staged') or [])}; "
        if redfish.get("staged")
        else ""
    )
    wanted = ", ".join(redfish.get("ok") or []) or "none"
    return [f"bios redfish: {patch}{staged}as wanted: {wanted}"]


SUMMARY_LINES: tuple[Callable[[Run], list[str]], ...] = (
    platform_lines,
    kernel_lines,
    sysctl_lines,
    hugepages_lines,
    governor_lines,
    reboot_lines,
    bios_audit_lines,
    redfish_lines,
)


def summary(
    the_plan: Mapping[str, Any],
    outcome: Mapping[str, Any],
    probe_after: Mapping[str, Any],
    reboot: Mapping[str, Any] | None = None,
) -> list[str]:
    """The per-host lines printed at the end of the play."""
    run = Run(the_plan, outcome, probe_after, reboot or {})
    return [line for part in SUMMARY_LINES for line in part(run)]


CHANGE_RESULTS = (
    "kernel_file",
    "kernel_regenerate",
    "sysctls",
    "hugepages",
    "governor",
    "governor_units",
)


def steady_outcome(outcome: Mapping[str, Any], reboot: Mapping[str, Any]) -> dict[str, Any]:
    """The outcome a rerun with nothing to change would have: no change results, and the
    reboot reasons still waiting (none once this run rebooted). Recorded for the no-op path."""
    steady = {k: v for k, v in outcome.items() if k not in CHANGE_RESULTS}
    steady["check_mode"] = False
    steady["reboot_reasons"] = (
        [] if reboot.get("rebooted") else list(outcome.get("reboot_reasons") or [])
    )
    return steady
