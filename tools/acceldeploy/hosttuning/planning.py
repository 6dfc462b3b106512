"""Plan one host from the checked settings, a few Ansible facts and what the read-only probe
(plugins/modules/host_tuning_probe.py) saw: what the role sets, what it can apply
live, and what it must leave for the next boot. One function per concern; plan() joins them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.hosttuning import kernelargs
from acceldeploy.hosttuning.inputs import Settings, settings

GOVERNOR_ARG = "cpufreq.default_governor"
CONTAINER_TECH = frozenset(
    {"container", "docker", "podman", "lxc", "containerd", "systemd-nspawn", "openvz", "wsl"}
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


# --------------------------------------------------------------------------- helpers


def changed_since_boot(probe: Mapping[str, Any], path: str) -> bool:
    """The file was written after this host (or container) booted."""
    info = (probe.get("files") or {}).get(path) or {}
    booted = probe.get("boot_time")
    return bool(info.get("exists")) and booted is not None and float(info["mtime"]) > booted


def gib(kb: int) -> str:
    return f"{kb / 1024 / 1024:.1f} GiB"


def _wanted_kernel_args(cfg: Settings, facts: Mapping[str, Any]) -> list[str]:
    args = list(cfg.kernel_args)
    for cond in cfg.kernel_args_conditional:
        if cond.matches(facts):
            args.extend(a for a in cond.args if a not in args)
    if cfg.governor_enabled:
        args = [a for a in args if not a.startswith(GOVERNOR_ARG + "=")]
        args.insert(0, f"{GOVERNOR_ARG}={cfg.governor}")
    return args


# --------------------------------------------------------------------------- concerns


def kernel_plan(
    cfg: Settings,
    view: HostView,
    facts: Mapping[str, Any],
    probe: Mapping[str, Any],
    arch: str,
) -> dict[str, Any]:
    """The kernel arguments for this architecture and the GRUB file, config and commands."""
    kernel: dict[str, Any] = {"enabled": cfg.kernel_args_enabled}
    if not cfg.kernel_args_enabled:
        return kernel
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
        missing=[] if view.container else kernelargs.missing(args, str(probe.get("cmdline") or "")),
        changed_since_boot=changed_since_boot(probe, grub.path),
    )
    return kernel


def sysctl_plan(
    cfg: Settings, view: HostView, facts: Mapping[str, Any], probe: Mapping[str, Any]
) -> dict[str, Any]:
    """The sysctls this kernel has (the others are reported, not written) and their file."""
    sysctl_now = probe.get("sysctl") or {}
    sysctls: dict[str, Any] = {"enabled": cfg.sysctls_enabled and bool(cfg.sysctls)}
    if not sysctls["enabled"]:
        return sysctls
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
    return sysctls


def hugepages_check(cfg: Settings, probe: Mapping[str, Any]) -> dict[str, Any]:
    """The hugepage count against this host's memory: refused with the fix when too many."""
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


def hugepages_plan(cfg: Settings, view: HostView, probe: Mapping[str, Any]) -> dict[str, Any]:
    return {**hugepages_check(cfg, probe), "live": view.live_sysctl}


def _governor_not_live(
    cfg: Settings, view: HostView, policies: Mapping[str, Any], offered: list[str]
) -> str:
    """Why the governor cannot be set live here ('' when it can)."""
    if not policies:
        return "no cpufreq driver on this host"
    if cfg.governor not in offered:
        return f"governor {cfg.governor} not offered (available: {', '.join(offered)})"
    if not view.live_sysfs:
        return view.why_not_live
    return ""


def governor_plan(cfg: Settings, view: HostView, probe: Mapping[str, Any]) -> dict[str, Any]:
    """Live through sysfs where cpufreq offers it; persistent through the kernel argument."""
    cpu = probe.get("cpu") or {}
    policies: dict[str, Any] = (cpu.get("cpufreq") or {}).get("policies") or {}
    units = probe.get("units") or {}
    governor: dict[str, Any] = {"enabled": cfg.governor_enabled, "name": cfg.governor}
    if not cfg.governor_enabled:
        return governor
    offered = sorted({g for p in policies.values() for g in (p.get("available") or [])})
    why = _governor_not_live(cfg, view, policies, offered)
    governor.update(
        policies=len(policies),
        differing=sorted(n for n, p in policies.items() if p.get("governor") != cfg.governor),
        live=not why,
        why_not_live=why,
        persistent=f"{GOVERNOR_ARG}={cfg.governor}" if cfg.kernel_args_enabled else "",
        disable_units=[u for u in cfg.governor_disable_units if units.get(u)],
    )
    return governor


def probe_plan(cfg: Settings) -> dict[str, Any]:
    """What the later probes (summary, after a reboot) read."""
    return {
        "sysctls": sorted({*cfg.sysctls, "vm.nr_hugepages"}),
        "files": [cfg.grub_dropin, kernelargs.DEFAULT_GRUB],
        "units": cfg.governor_disable_units,
    }


def host_plan(view: HostView, facts: Mapping[str, Any], arch: str) -> dict[str, Any]:
    return {
        "container": view.container,
        "virtual": view.virtual,
        "tech": view.tech,
        "why_not_live": view.why_not_live,
        "distribution": f"{facts.get('distribution', '?')} "
        f"{facts.get('distribution_version', '')}".strip(),
        "kernel": str(facts.get("kernel") or ""),
        "arch": arch,
    }


def bios_plan(cfg: Settings) -> dict[str, Any]:
    return {
        "audit": cfg.bios_audit_enabled,
        "redfish": bool(cfg.redfish_endpoint),
        "redfish_bios_url": f"{cfg.redfish_endpoint}{cfg.redfish_system}/Bios"
        if cfg.redfish_endpoint
        else "",
        "redfish_attributes": cfg.redfish_attributes,
    }


def reboot_plan(cfg: Settings) -> dict[str, Any]:
    return {
        "enabled": cfg.reboot,
        "batch": cfg.reboot_batch,
        "max_fail_percentage": cfg.reboot_max_fail_percentage,
        "timeout": cfg.reboot_timeout,
        "services": cfg.reboot_services,
    }


def plan(
    inputs: Mapping[str, Any], facts: Mapping[str, Any], probe: Mapping[str, Any]
) -> dict[str, Any]:
    """Everything the role does on this host, decided before it changes anything."""
    cfg = settings(inputs)
    view = host_view(facts, probe)
    arch = str(facts.get("architecture") or probe.get("arch") or "")
    return {
        "platform": cfg.platform,
        "probe": probe_plan(cfg),
        "host": host_plan(view, facts, arch),
        "kernel": kernel_plan(cfg, view, facts, probe, arch),
        "sysctls": sysctl_plan(cfg, view, facts, probe),
        "hugepages": hugepages_plan(cfg, view, probe),
        "governor": governor_plan(cfg, view, probe),
        "bios": bios_plan(cfg),
        "reboot": reboot_plan(cfg),
    }


GOVERNOR_FILES = "/sys/devices/system/cpu/cpufreq/policy*/scaling_governor"


def state_spec(the_plan: Mapping[str, Any]) -> dict[str, list[str]]:
    """What the no-op path compares with the last converge (acceldeploy.host.state.drift): every
    file the role writes or reads to decide, each live value it sets, /proc/cmdline (a reboot
    or a new kernel) and the units it keeps disabled."""
    grub = (the_plan.get("kernel") or {}).get("grub") or {}
    probe = the_plan.get("probe") or {}
    files = [*probe.get("files", []), grub.get("path"), grub.get("cfg_path"), "/proc/cmdline"]
    files += [(the_plan.get(part) or {}).get("file") for part in ("sysctls", "hugepages")]
    files += ["/proc/sys/" + key.replace(".", "/") for key in probe.get("sysctls", [])]
    files.append(GOVERNOR_FILES)
    return {"files": sorted({f for f in files if f}), "units": list(probe.get("units", []))}
