"""Host tuning decisions: what roles/host_tuning sets on a host, what it can apply live,
what waits for a reboot, what the BIOS audit finds, and the summary it prints.

Inputs are the role's variables (``host_tuning_*``, gathered in roles/host_tuning/vars/main.yml
as ``host_tuning_inputs``), a few Ansible facts, and what the read-only probe module saw on the
host. Bad input raises AcceldeployError naming the variable, before any host is changed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acceldeploy import kernelargs
from acceldeploy.errors import AcceldeployError

GOVERNOR_ARG = "cpufreq.default_governor"
CONTAINER_TECH = frozenset(
    {"container", "docker", "podman", "lxc", "containerd", "systemd-nspawn", "openvz", "wsl"}
)
SYSCTL_KEY = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_\-]+)+$")
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\-]+$")
DEEP_CSTATE_LATENCY_US = 50
INPUT_PREFIX = "host_tuning_"


# --------------------------------------------------------------------------- inputs


def _var(name: str) -> str:
    return INPUT_PREFIX + name


def as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0", ""):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise AcceldeployError(f"{_var(name)}: {value!r} is not a boolean; use true or false")


def as_int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool):
        raise AcceldeployError(f"{_var(name)}: {value!r} is not an integer")
    whole_str = isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value)
    whole_float = isinstance(value, float) and value.is_integer()
    if isinstance(value, int):
        number = value
    elif whole_str or whole_float:
        number = int(value)
    else:
        raise AcceldeployError(f"{_var(name)}: {value!r} is not an integer; give a whole number")
    if minimum is not None and number < minimum:
        raise AcceldeployError(f"{_var(name)}: {number} is below {minimum}; give {minimum} or more")
    if maximum is not None and number > maximum:
        raise AcceldeployError(f"{_var(name)}: {number} is above {maximum}; give {maximum} or less")
    return number


def as_str(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise AcceldeployError(f"{_var(name)}: {value!r} is not a string")
    return str(value)


def as_list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise AcceldeployError(f"{_var(name)}: {value!r} is not a list")
    return list(value)


def as_mapping(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AcceldeployError(f"{_var(name)}: {value!r} is not a mapping")
    return {str(k): v for k, v in value.items()}


def sysctl_map(value: Any, name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, raw in as_mapping(value, name).items():
        if not SYSCTL_KEY.match(key):
            raise AcceldeployError(
                f"{_var(name)}: {key!r} is not a sysctl key (like vm.swappiness)"
            )
        if isinstance(raw, bool) or raw is None or isinstance(raw, Mapping | list):
            raise AcceldeployError(f"{_var(name)}: {key} = {raw!r}: give a number or a string")
        out[key] = str(raw).strip()
    return out


def unit_names(value: Any, name: str) -> list[str]:
    out = []
    for raw in as_list(value, name):
        unit = as_str(raw, name)
        if not UNIT_NAME.match(unit):
            raise AcceldeployError(f"{_var(name)}: {unit!r} is not a systemd unit name")
        out.append(unit if "." in unit.rsplit("@", 1)[-1] else f"{unit}.service")
    return out


@dataclass(frozen=True)
class Conditional:
    """Extra kernel arguments for hosts matching a distribution and a kernel version prefix."""

    distribution: str
    kernel: str
    args: list[str]

    def matches(self, facts: Mapping[str, Any]) -> bool:
        distro_ok = not self.distribution or (
            str(facts.get("distribution") or "").lower() == self.distribution.lower()
        )
        kernel = str(facts.get("kernel") or "")
        kernel_ok = not self.kernel or kernel == self.kernel or kernel.startswith(self.kernel + ".")
        kernel_ok = kernel_ok or kernel.startswith(self.kernel + "-")
        return distro_ok and kernel_ok


@dataclass(frozen=True)
class Settings:
    platform: str
    kernel_args_enabled: bool
    kernel_args: list[str]
    kernel_args_conditional: list[Conditional]
    grub_dropin: str
    grub_cfg: str
    sysctls_enabled: bool
    sysctls: dict[str, str]
    sysctl_file: str
    hugepages_enabled: bool
    hugepages: int
    hugepages_max_percent: int
    hugepages_file: str
    governor_enabled: bool
    governor: str
    governor_disable_units: list[str]
    bios_audit_enabled: bool
    redfish_endpoint: str
    redfish_credentials: bool
    redfish_system: str
    redfish_attributes: dict[str, Any]
    reboot: bool
    reboot_batch: int
    reboot_max_fail_percentage: int
    reboot_timeout: int
    reboot_services: list[str]


def _path(value: Any, name: str) -> str:
    text = as_str(value, name)
    if not text.startswith("/"):
        raise AcceldeployError(f"{_var(name)}: {text!r} is not an absolute path")
    return text


def settings(inputs: Mapping[str, Any]) -> Settings:
    """Check every input and resolve the platform profile; errors name the variable."""
    profiles = as_mapping(inputs.get("profiles"), "profiles")
    platform = as_str(inputs.get("platform"), "platform")
    if platform not in profiles:
        known = ", ".join(sorted(profiles)) or "(none: host_tuning_profiles is empty)"
        raise AcceldeployError(
            f"acceldeploy_platform (host_tuning_platform) is {platform!r}: set it to one of {known}"
        )
    conditional = []
    for i, raw in enumerate(
        as_list(inputs.get("kernel_args_conditional"), "kernel_args_conditional")
    ):
        entry = as_mapping(raw, f"kernel_args_conditional[{i}]")
        conditional.append(
            Conditional(
                distribution=as_str(entry.get("distribution"), f"kernel_args_conditional[{i}]"),
                kernel=as_str(entry.get("kernel"), f"kernel_args_conditional[{i}]"),
                args=kernelargs.check_args(
                    as_list(entry.get("args"), f"kernel_args_conditional[{i}].args"),
                    _var(f"kernel_args_conditional[{i}].args"),
                ),
            )
        )
    kernel_args = kernelargs.check_args(
        [
            *as_list(inputs.get("kernel_args"), "kernel_args"),
            *as_list(inputs.get("kernel_args_extra"), "kernel_args_extra"),
        ],
        "host_tuning_kernel_args / host_tuning_kernel_args_extra",
    )
    governor = as_str(inputs.get("governor"), "governor")
    if not re.fullmatch(r"[a-z_]+", governor or "x"):
        raise AcceldeployError(f"host_tuning_governor: {governor!r} is not a cpufreq governor name")
    endpoint = as_str(inputs.get("bios_redfish_endpoint"), "bios_redfish_endpoint").rstrip("/")
    attributes = as_mapping(inputs.get("bios_redfish_attributes"), "bios_redfish_attributes")
    credentials = as_bool(inputs.get("bios_redfish_credentials"), "bios_redfish_credentials")
    if endpoint:
        if not re.match(r"^https?://[^/\s]+$", endpoint):
            raise AcceldeployError(
                f"host_tuning_bios_redfish_endpoint: {endpoint!r} is not a BMC base URL "
                "(like https://10.0.0.21)"
            )
        if not credentials:
            raise AcceldeployError(
                "host_tuning_bios_redfish_endpoint is set but host_tuning_bios_redfish_username "
                "/ host_tuning_bios_redfish_password are empty: put them in Ansible Vault"
            )
        if not attributes:
            raise AcceldeployError(
                "host_tuning_bios_redfish_endpoint is set but host_tuning_bios_redfish_attributes "
                "is empty: name the vendor's BIOS attributes and values (read them from GET "
                "<endpoint>/redfish/v1/Systems/<id>/Bios)"
            )
    system = as_str(inputs.get("bios_redfish_system"), "bios_redfish_system")
    if not system.startswith("/redfish/v1/"):
        raise AcceldeployError(
            f"host_tuning_bios_redfish_system: {system!r} should be a path like "
            "/redfish/v1/Systems/1"
        )
    grub_cfg = as_str(inputs.get("grub_cfg"), "grub_cfg")
    if grub_cfg and not grub_cfg.startswith("/"):
        raise AcceldeployError(f"host_tuning_grub_cfg: {grub_cfg!r} is not an absolute path")
    return Settings(
        platform=platform,
        kernel_args_enabled=as_bool(inputs.get("kernel_args_enabled"), "kernel_args_enabled"),
        kernel_args=kernel_args,
        kernel_args_conditional=conditional,
        grub_dropin=_path(inputs.get("grub_dropin"), "grub_dropin"),
        grub_cfg=grub_cfg,
        sysctls_enabled=as_bool(inputs.get("sysctls_enabled"), "sysctls_enabled"),
        sysctls={
            **sysctl_map(inputs.get("sysctls"), "sysctls"),
            **sysctl_map(inputs.get("sysctls_extra"), "sysctls_extra"),
        },
        sysctl_file=_path(inputs.get("sysctl_file"), "sysctl_file"),
        hugepages_enabled=as_bool(inputs.get("hugepages_enabled"), "hugepages_enabled"),
        hugepages=as_int(inputs.get("hugepages"), "hugepages", minimum=0),
        hugepages_max_percent=as_int(
            inputs.get("hugepages_max_percent"), "hugepages_max_percent", minimum=1, maximum=95
        ),
        hugepages_file=_path(inputs.get("hugepages_file"), "hugepages_file"),
        governor_enabled=as_bool(inputs.get("governor_enabled"), "governor_enabled"),
        governor=governor,
        governor_disable_units=unit_names(
            inputs.get("governor_disable_units"), "governor_disable_units"
        ),
        bios_audit_enabled=as_bool(inputs.get("bios_audit_enabled"), "bios_audit_enabled"),
        redfish_endpoint=endpoint,
        redfish_credentials=credentials,
        redfish_system=system.rstrip("/"),
        redfish_attributes=attributes,
        reboot=as_bool(inputs.get("reboot"), "reboot"),
        reboot_batch=as_int(inputs.get("reboot_batch"), "reboot_batch", minimum=1),
        reboot_max_fail_percentage=as_int(
            inputs.get("reboot_max_fail_percentage"),
            "reboot_max_fail_percentage",
            minimum=0,
            maximum=100,
        ),
        reboot_timeout=as_int(inputs.get("reboot_timeout"), "reboot_timeout", minimum=60),
        reboot_services=unit_names(inputs.get("reboot_services"), "reboot_services"),
    )


# --------------------------------------------------------------------------- host view


@dataclass(frozen=True)
class HostView:
    container: bool
    virtual: bool
    tech: str
    live_sysctl: bool
    live_sysfs: bool
    why_not_live: str


def host_view(facts: Mapping[str, Any], probe: Mapping[str, Any]) -> HostView:
    vtype = str(facts.get("virtualization_type") or "")
    role = str(facts.get("virtualization_role") or "")
    guest = {str(t) for t in facts.get("virtualization_tech_guest") or []}
    hint = str(probe.get("container") or "")
    container = bool(hint) or (
        role == "guest" and (vtype in CONTAINER_TECH or bool(guest & CONTAINER_TECH))
    )
    tech = hint or next(iter(sorted(guest & CONTAINER_TECH)), "") or vtype
    virtual = not container and role == "guest" and vtype not in ("", "NA")
    writable = probe.get("writable") or {}
    proc_sys = bool(writable.get("proc_sys"))
    sys_rw = bool(writable.get("sys"))
    if container:
        why = (
            f"container ({tech or 'unknown'}): the kernel is the machine's, /proc/sys is read-only"
        )
    elif not proc_sys:
        why = "/proc/sys is read-only on this host"
    else:
        why = ""
    return HostView(
        container=container,
        virtual=virtual,
        tech=tech if container else (vtype if virtual else ""),
        live_sysctl=not container and proc_sys,
        live_sysfs=not container and sys_rw,
        why_not_live=why or ("" if sys_rw else "/sys is read-only on this host"),
    )


# --------------------------------------------------------------------------- plan


def _wanted_kernel_args(cfg: Settings, facts: Mapping[str, Any]) -> list[str]:
    args = list(cfg.kernel_args)
    for cond in cfg.kernel_args_conditional:
        if cond.matches(facts):
            args.extend(a for a in cond.args if a not in args)
    if cfg.governor_enabled:
        args = [a for a in args if not a.startswith(GOVERNOR_ARG + "=")]
        args.insert(0, f"{GOVERNOR_ARG}={cfg.governor}")
    return args


def hugepages_check(cfg: Settings, probe: Mapping[str, Any]) -> dict[str, Any]:
    meminfo = probe.get("meminfo") or {}
    size_kb = int(meminfo.get("Hugepagesize") or 2048)
    total_kb = int(meminfo.get("MemTotal") or 0)
    wanted_kb = cfg.hugepages * size_kb
    if cfg.hugepages_enabled and cfg.hugepages and total_kb:
        limit_kb = total_kb * cfg.hugepages_max_percent // 100
        if wanted_kb > limit_kb:
            fits = limit_kb // size_kb
            raise AcceldeployError(
                f"host_tuning_hugepages={cfg.hugepages} x {size_kb} kB = {gib(wanted_kb)} is "
                f"{100 * wanted_kb // total_kb}% of this host's {gib(total_kb)} memory, above "
                f"host_tuning_hugepages_max_percent={cfg.hugepages_max_percent}%: lower "
                f"host_tuning_hugepages to {fits} or less for this host (group/host vars), or "
                "raise the limit"
            )
    return {
        "enabled": cfg.hugepages_enabled and cfg.hugepages > 0,
        "count": cfg.hugepages,
        "size_kb": size_kb,
        "total": gib(wanted_kb),
        "memory": gib(total_kb),
        "file": cfg.hugepages_file,
        "live_before": int(meminfo.get("HugePages_Total") or 0),
    }


def changed_since_boot(probe: Mapping[str, Any], path: str) -> bool:
    """The file was written after this host (or container) booted."""
    info = (probe.get("files") or {}).get(path) or {}
    booted = probe.get("boot_time")
    return bool(info.get("exists")) and booted is not None and float(info["mtime"]) > booted


def gib(kb: int) -> str:
    return f"{kb / 1024 / 1024:.1f} GiB"


def plan(
    inputs: Mapping[str, Any], facts: Mapping[str, Any], probe: Mapping[str, Any]
) -> dict[str, Any]:
    """Everything the role does on this host, decided before it changes anything."""
    cfg = settings(inputs)
    view = host_view(facts, probe)
    arch = str(facts.get("architecture") or probe.get("arch") or "")
    cmdline = str(probe.get("cmdline") or "")

    kernel: dict[str, Any] = {"enabled": cfg.kernel_args_enabled}
    if cfg.kernel_args_enabled:
        args, dropped = kernelargs.for_architecture(_wanted_kernel_args(cfg, facts), arch)
        grub = kernelargs.grub_plan(
            kernelargs.GrubFacts.from_probe(facts, probe), args, cfg.grub_dropin, cfg.grub_cfg
        )
        kernel.update(
            args=args,
            dropped=dropped,
            grub=grub.to_dict(),
            regenerate=not view.container and grub.bootloader_found,
            cmdline_applicable=not view.container,
            missing=[] if view.container else kernelargs.missing(args, cmdline),
            changed_since_boot=changed_since_boot(probe, grub.path),
        )

    sysctl_now = probe.get("sysctl") or {}
    sysctls: dict[str, Any] = {"enabled": cfg.sysctls_enabled and bool(cfg.sysctls)}
    if sysctls["enabled"]:
        available = {k: v for k, v in cfg.sysctls.items() if sysctl_now.get(k) is not None}
        sysctls.update(
            file=cfg.sysctl_file,
            persist=available,
            unavailable={
                k: f"not in /proc/sys on kernel {facts.get('kernel', '?')}"
                for k in cfg.sysctls
                if k not in available
            },
            live=view.live_sysctl,
            before={k: sysctl_now.get(k) for k in available},
        )

    hugepages = hugepages_check(cfg, probe)
    hugepages["live"] = view.live_sysctl

    cpu = probe.get("cpu") or {}
    policies: dict[str, Any] = (cpu.get("cpufreq") or {}).get("policies") or {}
    units = probe.get("units") or {}
    governor: dict[str, Any] = {"enabled": cfg.governor_enabled, "name": cfg.governor}
    if cfg.governor_enabled:
        available_govs = sorted({g for p in policies.values() for g in (p.get("available") or [])})
        differing = sorted(n for n, p in policies.items() if p.get("governor") != cfg.governor)
        if not policies:
            why = "no cpufreq driver on this host"
        elif cfg.governor not in available_govs:
            why = f"governor {cfg.governor} not offered (available: {', '.join(available_govs)})"
        elif not view.live_sysfs:
            why = view.why_not_live
        else:
            why = ""
        governor.update(
            policies=len(policies),
            differing=differing,
            live=not why,
            why_not_live=why,
            persistent=f"{GOVERNOR_ARG}={cfg.governor}" if cfg.kernel_args_enabled else "",
            disable_units=[u for u in cfg.governor_disable_units if units.get(u)],
        )

    return {
        "platform": cfg.platform,
        "probe": {
            "sysctls": sorted({*cfg.sysctls, "vm.nr_hugepages"}),
            "files": [cfg.grub_dropin, kernelargs.DEFAULT_GRUB],
            "units": cfg.governor_disable_units,
        },
        "host": {
            "container": view.container,
            "virtual": view.virtual,
            "tech": view.tech,
            "why_not_live": view.why_not_live,
            "distribution": f"{facts.get('distribution', '?')} "
            f"{facts.get('distribution_version', '')}".strip(),
            "kernel": str(facts.get("kernel") or ""),
            "arch": arch,
        },
        "kernel": kernel,
        "sysctls": sysctls,
        "hugepages": hugepages,
        "governor": governor,
        "bios": {
            "audit": cfg.bios_audit_enabled,
            "redfish": bool(cfg.redfish_endpoint),
            "redfish_bios_url": f"{cfg.redfish_endpoint}{cfg.redfish_system}/Bios"
            if cfg.redfish_endpoint
            else "",
            "redfish_attributes": cfg.redfish_attributes,
        },
        "reboot": {
            "enabled": cfg.reboot,
            "batch": cfg.reboot_batch,
            "max_fail_percentage": cfg.reboot_max_fail_percentage,
            "timeout": cfg.reboot_timeout,
            "services": cfg.reboot_services,
        },
    }


# --------------------------------------------------------------------------- reboot


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
        else _changed(kernel_file_results)
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


# --------------------------------------------------------------------------- BIOS


def _cstate_depth(name: str) -> int:
    match = re.search(r"C(\d+)", name or "")
    return int(match.group(1)) if match else 0


def bios_audit(the_plan: Mapping[str, Any], probe: Mapping[str, Any]) -> dict[str, Any]:
    """What the OS can see of the BIOS settings the seeds ask for, as findings with fixes.

    Seed 004 1.1.1: CPU performance mode, P-states on, C6 off. Inside a container or a VM the
    firmware is not this host's: the findings are then informational only.
    """
    host = the_plan.get("host") or {}
    cpu = probe.get("cpu") or {}
    dmi = probe.get("dmi") or {}
    governor = str((the_plan.get("governor") or {}).get("name") or "performance")
    findings: list[dict[str, str]] = []

    def add(item: str, found: str, expected: str, fix: str) -> None:
        findings.append({"item": item, "found": found, "expected": expected, "fix": fix})

    idle = cpu.get("cpuidle") or {}
    deep = [
        s
        for s in idle.get("states") or []
        if not s.get("disabled")
        and (
            _cstate_depth(str(s.get("name"))) >= 2
            or int(s.get("latency") or 0) >= DEEP_CSTATE_LATENCY_US
        )
    ]
    if deep:
        names = ", ".join(f"{s.get('name')} ({s.get('latency')} us)" for s in deep)
        add(
            "C-states",
            f"deep idle states enabled: {names} (cpuidle driver {idle.get('driver') or '?'})",
            "C6 and deeper disabled",
            "BIOS: Processor / Power management > C6 (and C1E/package C-state) = Disabled; "
            "intel_idle.max_cstate=0 only switches the driver, the BIOS tables still offer C6",
        )

    x86_intel = str(cpu.get("vendor") or "") == "GenuineIntel"
    pstate = cpu.get("intel_pstate")
    cpufreq = cpu.get("cpufreq") or {}
    policies = cpufreq.get("policies") or {}
    if x86_intel and (pstate is None or pstate.get("status") == "off"):
        add(
            "P-states",
            f"intel_pstate not active (cpufreq driver: {cpufreq.get('driver') or 'none'})",
            "intel_pstate active (HWP)",
            "BIOS: enable Intel SpeedStep (EIST) / Hardware P-states (HWP native mode); "
            "do not pass intel_pstate=disable",
        )
    elif not policies:
        add(
            "P-states",
            "no cpufreq driver: the OS cannot set CPU frequency",
            "a cpufreq driver (P-states under OS control)",
            "BIOS: enable P-states / CPPC with OS control (power policy 'OS controlled'), or "
            "set the BIOS power profile to Performance",
        )
    if pstate and str(pstate.get("no_turbo")) == "1":
        add(
            "Turbo",
            "turbo disabled (intel_pstate/no_turbo = 1)",
            "turbo on",
            "BIOS: Intel Turbo Boost = Enabled",
        )

    slow = sorted(n for n, p in policies.items() if p.get("governor") != governor)
    if slow:
        now = sorted({str(policies[n].get("governor")) for n in slow})
        add(
            "Governor",
            f"{len(slow)}/{len(policies)} cpufreq policies on {', '.join(now)}",
            governor,
            f"set live by this role; kept across reboots by {GOVERNOR_ARG}={governor}; "
            "BIOS power profile: Performance",
        )
    epp = sorted(
        {
            str(p.get("epp"))
            for p in policies.values()
            if p.get("epp") and p.get("epp") != "performance"
        }
    )
    if epp and not slow:
        add(
            "Energy/performance preference",
            ", ".join(epp),
            "performance",
            "BIOS: Energy Performance Bias / power profile = Performance",
        )

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
    applicable = not host.get("container") and not host.get("virtual")
    return {
        "applicable": applicable,
        "why": ""
        if applicable
        else f"{host.get('tech') or 'virtual'}: the firmware is not this host's",
        "system": info,
        "findings": findings,
        "warnings": [
            f"BIOS audit: {f['item']}: found {f['found']}; expected {f['expected']}. "
            f"Fix: {f['fix']}"
            for f in findings
        ]
        if applicable
        else [],
    }


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


# --------------------------------------------------------------------------- summary


def _changed(result: Any) -> bool:
    """Whether a registered result (or a list of them, or a loop's) reports a change."""
    if isinstance(result, Sequence) and not isinstance(result, str):
        return any(_changed(r) for r in result)
    if not isinstance(result, Mapping):
        return False
    if result.get("results"):
        return any(_changed(r) for r in result["results"])
    return bool(result.get("changed")) and not result.get("skipped")


def summary(
    the_plan: Mapping[str, Any],
    outcome: Mapping[str, Any],
    probe_after: Mapping[str, Any],
    reboot: Mapping[str, Any] | None = None,
) -> list[str]:
    """The per-host lines printed at the end of the play."""
    host = the_plan.get("host") or {}
    check = bool(outcome.get("check_mode"))
    verb = "would change" if check else "changed"
    where = ", ".join(
        x
        for x in (
            the_plan.get("platform"),
            host.get("distribution"),
            host.get("kernel"),
            host.get("tech") and f"{host['tech']}",
        )
        if x
    )
    lines = [f"platform {where}" + (" (check mode: nothing was changed)" if check else "")]

    kernel = the_plan.get("kernel") or {}
    if kernel.get("enabled"):
        grub = kernel.get("grub") or {}
        state = verb if _changed(outcome.get("kernel_file")) else "unchanged"
        text = f"kernel args: {' '.join(kernel.get('args') or [])} in {grub.get('path')} ({state})"
        if kernel.get("dropped"):
            text += "; skipped " + ", ".join(
                f"{d['arg']} ({d['reason']})" for d in kernel["dropped"]
            )
        if not kernel.get("regenerate"):
            text += "; boot config not regenerated: " + (
                "container, no boot loader of its own"
                if host.get("container")
                else f"no GRUB config at {grub.get('cfg_path')}"
            )
        elif _changed(outcome.get("kernel_regenerate")):
            text += f"; {grub.get('cfg_path')} regenerated"
        lines.append(text)
    else:
        lines.append("kernel args: not managed (host_tuning_kernel_args_enabled: false)")

    sysctls = the_plan.get("sysctls") or {}
    live_now = probe_after.get("sysctl") or {}
    if sysctls.get("enabled"):
        persist = sysctls.get("persist") or {}
        off = {k: live_now.get(k) for k, v in persist.items() if str(live_now.get(k)) != v}
        text = (
            f"sysctls: {', '.join(f'{k}={v}' for k, v in persist.items())} in {sysctls.get('file')}"
        )
        text += f" ({verb if _changed(outcome.get('sysctls')) else 'unchanged'})"
        if off:
            live = "not applied live" if not sysctls.get("live") else "live value differs"
            text += f"; {live} ({host.get('why_not_live') or 'kernel refused'}): " + ", ".join(
                f"{k} is {v}" for k, v in off.items()
            )
        else:
            text += "; in effect"
        for key, why in (sysctls.get("unavailable") or {}).items():
            text += f"; {key} skipped ({why})"
        lines.append(text)
    else:
        lines.append("sysctls: none managed")

    huge = the_plan.get("hugepages") or {}
    if huge.get("enabled"):
        now = int((probe_after.get("meminfo") or {}).get("HugePages_Total") or 0)
        text = (
            f"hugepages: {huge['count']} x {huge['size_kb']} kB = {huge['total']} of "
            f"{huge['memory']} in {huge['file']} "
            f"({verb if _changed(outcome.get('hugepages')) else 'unchanged'})"
        )
        if now == huge["count"]:
            text += "; live"
        elif not huge.get("live"):
            text += f"; not applied live ({host.get('why_not_live')}): {now} now"
        else:
            text += f"; only {now} allocated live (memory fragmented): the next boot allocates them"
        lines.append(text)
    else:
        lines.append("hugepages: not managed (count 0 or host_tuning_hugepages_enabled: false)")

    gov = the_plan.get("governor") or {}
    if gov.get("enabled"):
        policies = ((probe_after.get("cpu") or {}).get("cpufreq") or {}).get("policies") or {}
        governors = sorted({str(p.get("governor")) for p in policies.values()})
        text = f"governor: {gov.get('name')}"
        if gov.get("live"):
            text += f" live on {len(policies)} policies ({', '.join(governors)})"
            if _changed(outcome.get("governor")):
                text += f", {verb}"
        else:
            text += f" not set live ({gov.get('why_not_live')})"
        if gov.get("persistent"):
            text += f"; persistent via {gov['persistent']}"
        if _changed(outcome.get("governor_units")):
            text += f"; disabled {', '.join(gov.get('disable_units') or [])}"
        lines.append(text)

    reasons = list(outcome.get("reboot_reasons") or [])
    reboot = reboot or {}
    if reboot.get("rebooted"):
        check_text = (reboot.get("cmdline") or {}).get("message") or ""
        lines.append(f"reboot: done ({'; '.join(reasons)}); cmdline check: {check_text}")
    elif reasons:
        hint = (
            "the rolling reboot did not run (check mode or --skip-tags)"
            if (the_plan.get("reboot") or {}).get("enabled")
            else "set host_tuning_reboot: true to reboot rolling, or reboot it yourself"
        )
        lines.append(f"reboot: pending - {'; '.join(reasons)} - {hint}")
    else:
        lines.append("reboot: not needed")

    audit = outcome.get("bios_audit") or {}
    if audit:
        if not audit.get("applicable"):
            lines.append(
                f"bios audit: not applicable ({audit.get('why')}); "
                f"seen on the machine underneath ({len(audit.get('findings') or [])}): "
                + ("; ".join(f["item"] for f in audit.get("findings") or []) or "none")
            )
        elif audit.get("findings"):
            lines.append(
                f"bios audit: {len(audit['findings'])} deviation(s): "
                + "; ".join(f"{f['item']}: {f['found']} -> {f['fix']}" for f in audit["findings"])
            )
        else:
            lines.append(f"bios audit: as recommended ({audit.get('system')})")
    redfish = outcome.get("redfish") or {}
    if redfish:
        lines.append(
            "bios redfish: "
            + (
                f"{verb} {', '.join(sorted(redfish.get('patch') or {}))}; "
                if redfish.get("patch")
                else ""
            )
            + (
                f"staged until reboot: {', '.join(redfish.get('staged') or [])}; "
                if redfish.get("staged")
                else ""
            )
            + f"as wanted: {', '.join(redfish.get('ok') or []) or 'none'}"
        )
    return lines
