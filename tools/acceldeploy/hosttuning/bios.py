"""The BIOS: what the OS can see of the settings the seeds ask for (an audit of named checks,
each a finding with its fix), and the Redfish BIOS attributes to stage through the BMC."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.hosttuning.planning import GOVERNOR_ARG

DEEP_CSTATE_LATENCY_US = 50

Finding = dict[str, str]


def _cstate_depth(name: str) -> int:
    match = re.search(r"C(\d+)", name or "")
    return int(match.group(1)) if match else 0


def _finding(item: str, found: str, expected: str, fix: str) -> Finding:
    return {"item": item, "found": found, "expected": expected, "fix": fix}


@dataclass(frozen=True)
class CpuView:
    """What the probe saw of the CPU's power management, and the governor the plan wants."""

    governor: str
    idle: Mapping[str, Any]
    vendor: str
    pstate: Any  # intel_pstate's sysfs values, None where there is no intel_pstate
    cpufreq: Mapping[str, Any]
    policies: Mapping[str, Any]

    @classmethod
    def from_probe(cls, the_plan: Mapping[str, Any], probe: Mapping[str, Any]) -> CpuView:
        cpu = probe.get("cpu") or {}
        cpufreq = cpu.get("cpufreq") or {}
        return cls(
            governor=str((the_plan.get("governor") or {}).get("name") or "performance"),
            idle=cpu.get("cpuidle") or {},
            vendor=str(cpu.get("vendor") or ""),
            pstate=cpu.get("intel_pstate"),
            cpufreq=cpufreq,
            policies=cpufreq.get("policies") or {},
        )

    @property
    def slow(self) -> list[str]:
        """The cpufreq policies not on the wanted governor."""
        return sorted(n for n, p in self.policies.items() if p.get("governor") != self.governor)


def check_cstates(cpu: CpuView) -> Finding | None:
    deep = [
        s
        for s in cpu.idle.get("states") or []
        if not s.get("disabled")
        and (
            _cstate_depth(str(s.get("name"))) >= 2
            or int(s.get("latency") or 0) >= DEEP_CSTATE_LATENCY_US
        )
    ]
    if not deep:
        return None
    names = ", ".join(f"{s.get('name')} ({s.get('latency')} us)" for s in deep)
    return _finding(
        "C-states",
        f"deep idle states enabled: {names} (cpuidle driver {cpu.idle.get('driver') or '?'})",
        "C6 and deeper disabled",
        "BIOS: Processor / Power management > C6 (and C1E/package C-state) = Disabled; "
        "intel_idle.max_cstate=0 only switches the driver, the BIOS tables still offer C6",
    )


def check_pstates(cpu: CpuView) -> Finding | None:
    if cpu.vendor == "GenuineIntel" and (cpu.pstate is None or cpu.pstate.get("status") == "off"):
        return _finding(
            "P-states",
            f"intel_pstate not active (cpufreq driver: {cpu.cpufreq.get('driver') or 'none'})",
            "intel_pstate active (HWP)",
            "BIOS: enable Intel SpeedStep (EIST) / Hardware P-states (HWP native mode); "
            "do not pass intel_pstate=disable",
        )
    if not cpu.policies:
        return _finding(
            "P-states",
            "no cpufreq driver: the OS cannot set CPU frequency",
            "a cpufreq driver (P-states under OS control)",
            "BIOS: enable P-states / CPPC with OS control (power policy 'OS controlled'), or "
            "set the BIOS power profile to Performance",
        )
    return None


def check_turbo(cpu: CpuView) -> Finding | None:
    if not (cpu.pstate and str(cpu.pstate.get("no_turbo")) == "1"):
        return None
    return _finding(
        "Turbo",
        "turbo disabled (intel_pstate/no_turbo = 1)",
        "turbo on",
        "BIOS: Intel Turbo Boost = Enabled",
    )


def check_governor(cpu: CpuView) -> Finding | None:
    slow = cpu.slow
    if not slow:
        return None
    now = sorted({str(cpu.policies[n].get("governor")) for n in slow})
    return _finding(
        "Governor",
        f"{len(slow)}/{len(cpu.policies)} cpufreq policies on {', '.join(now)}",
        cpu.governor,
        f"set live by this role; kept across reboots by {GOVERNOR_ARG}={cpu.governor}; "
        "BIOS power profile: Performance",
    )


def check_energy_preference(cpu: CpuView) -> Finding | None:
    """Only when the governor is right (a wrong governor is the finding to fix first)."""
    epp = sorted(
        {
            str(p.get("epp"))
            for p in cpu.policies.values()
            if p.get("epp") and p.get("epp") != "performance"
        }
    )
    if not epp or cpu.slow:
        return None
    return _finding(
        "Energy/performance preference",
        ", ".join(epp),
        "performance",
        "BIOS: Energy Performance Bias / power profile = Performance",
    )


AUDIT_CHECKS: tuple[Callable[[CpuView], Finding | None], ...] = (
    check_cstates,
    check_pstates,
    check_turbo,
    check_governor,
    check_energy_preference,
)


def system_info(probe: Mapping[str, Any]) -> str:
    """The machine and its BIOS as DMI (and dmidecode, where present) name them."""
    dmi = probe.get("dmi") or {}
    dmidecode = probe.get("dmidecode") or {}
    system = (
        " ".join(str(dmi.get(k)) for k in ("sys_vendor", "product_name") if dmi.get(k))
        or "unknown system"
    )
    bios = " ".join(
        str(dmi.get(k)) for k in ("bios_vendor", "bios_version", "bios_date") if dmi.get(k)
    )
    info = f"{system}; BIOS {bios or 'not visible'}"
    if dmidecode.get("processors"):
        speeds = sorted(
            {f"{p.get('current_speed')}/{p.get('max_speed')}" for p in dmidecode["processors"]}
        )
        info += f"; {len(dmidecode['processors'])} sockets, current/max speed {', '.join(speeds)}"
    return info


def bios_audit(the_plan: Mapping[str, Any], probe: Mapping[str, Any]) -> dict[str, Any]:
    """What the OS can see of the BIOS settings the seeds ask for, as findings with fixes.

    Seed 004 1.1.1: CPU performance mode, P-states on, C6 off. Inside a container or a VM the
    firmware is not this host's: the findings are then informational only.
    """
    host = the_plan.get("host") or {}
    cpu = CpuView.from_probe(the_plan, probe)
    findings = [f for f in (check(cpu) for check in AUDIT_CHECKS) if f is not None]
    applicable = not host.get("container") and not host.get("virtual")
    return {
        "applicable": applicable,
        "why": ""
        if applicable
        else f"{host.get('tech') or 'virtual'}: the firmware is not this host's",
        "system": system_info(probe),
        "findings": findings,
        "warnings": [
            f"BIOS audit: {f['item']}: found {f['found']}; expected {f['expected']}. "
            f"Fix: {f['fix']}"
            for f in findings
        ]
        if applicable
        else [],
    }


# --------------------------------------------------------------------------- Redfish


def redfish_changes(
    wanted: Mapping[str, Any], bios: Mapping[str, Any], settings_object: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Which BIOS attributes to PATCH, which are already staged, which are already right."""
    current = (bios.get("Attributes") or {}) if isinstance(bios, Mapping) else {}
    pending = (settings_object or {}).get("Attributes") or {}
    unknown = sorted(k for k in wanted if k not in current)
    if unknown:
        raise AcceldeployError(
            f"host_tuning_bios_redfish_attributes: the BMC's BIOS has no {', '.join(unknown)}; "
            "use the attribute names GET <endpoint>/redfish/v1/Systems/<id>/Bios lists"
        )
    patch = {k: v for k, v in wanted.items() if current[k] != v and pending.get(k) != v}
    staged = sorted(k for k, v in wanted.items() if current[k] != v and pending.get(k) == v)
    return {
        "patch": patch,
        "staged": sorted([*staged, *patch]),
        "ok": sorted(k for k, v in wanted.items() if current[k] == v),
    }


def redfish_settings_url(endpoint: str, bios_url: str, bios: Mapping[str, Any]) -> str:
    """Where pending BIOS settings go: the @Redfish.Settings object, else <Bios>/Settings."""
    settings_ref = (bios.get("@Redfish.Settings") or {}).get("SettingsObject") or {}
    ref = str(settings_ref.get("@odata.id") or "")
    if ref.startswith("/"):
        return endpoint.rstrip("/") + ref
    return bios_url.rstrip("/") + "/Settings"
