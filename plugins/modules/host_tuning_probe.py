#!/usr/bin/python
"""Read-only probe of what host tuning depends on; decisions live in tools/acceldeploy."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: host_tuning_probe
short_description: Read what host tuning depends on, change nothing
description:
  - Reads /proc/cmdline, the requested sysctls, /proc/meminfo, cpufreq, cpuidle and
    intel_pstate from sysfs, DMI strings, C(dmidecode -t processor) when present, the GRUB
    files and boot entries, whether /proc/sys and /sys are mounted read-only, and whether
    some files and systemd units exist.
  - Never changes the host; safe in check mode. The role decides with the result through
    plugins/filter/host_tuning_filters.py.
options:
  sysctls:
    description: sysctl keys to read (dotted, like vm.swappiness).
    type: list
    elements: str
    default: []
  files:
    description: Files whose existence and modification time are reported under C(files).
    type: list
    elements: str
    default: []
  units:
    description: systemd unit names whose unit files' existence is reported under C(units).
    type: list
    elements: str
    default: []
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Probe the host
  acceldeploy.fleet.host_tuning_probe:
    sysctls: [vm.nr_hugepages, kernel.numa_balancing]
    files: [/etc/default/grub.d/90-acceldeploy.cfg]
  register: host_tuning_probe
"""

RETURN = r"""
cmdline:
  description: /proc/cmdline
  type: str
  returned: always
arch:
  description: machine architecture
  type: str
  returned: always
container:
  description: container technology seen from inside (empty on a host)
  type: str
  returned: always
efi:
  description: booted through UEFI
  type: bool
  returned: always
writable:
  description: whether /proc/sys and /sys are writable mounts
  type: dict
  returned: always
sysctl:
  description: key -> current value, null when the kernel lacks it
  type: dict
  returned: always
meminfo:
  description: MemTotal, Hugepagesize (kB) and HugePages_Total
  type: dict
  returned: always
cpu:
  description: vendor, cpufreq policies, intel_pstate, cpuidle states
  type: dict
  returned: always
grub:
  description: GRUB tools, /etc/default/grub text, kernel options per boot config
  type: dict
  returned: always
dmi:
  description: DMI strings from sysfs
  type: dict
  returned: always
dmidecode:
  description: processor sockets from dmidecode
  type: dict
  returned: always
files:
  description: path -> {exists, mtime}
  type: dict
  returned: always
boot_time:
  description: when this system's init (PID 1) started, seconds since the epoch
  type: float
  returned: always
units:
  description: unit name -> unit file exists
  type: dict
  returned: always
"""

import glob
import os
import platform
import re

from ansible.module_utils.basic import AnsibleModule

CPU = "/sys/devices/system/cpu"
GRUB_CFGS = ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg")
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
LINUX_LINE = re.compile(r"^\s*(?:linux|linuxefi|linux16)\s+\S+\s*(.*)$")
DMI_KEYS = ("sys_vendor", "product_name", "bios_vendor", "bios_version", "bios_date")


def read(path: str, limit: int = 4 * 1024 * 1024) -> str | None:
    try:
        with open(path, errors="replace") as handle:
            return handle.read(limit)
    except OSError:
        return None


def read_line(path: str) -> str | None:
    text = read(path, 4096)
    return None if text is None else text.strip()


def mounted_read_only(target: str) -> bool:
    best, options = "", ""
    for line in (read("/proc/mounts") or "").splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, options = point, fields[3]
    return "ro" in options.split(",")


def container_hint() -> str:
    text = read_line("/run/systemd/container")
    if text:
        return text
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    return ""


def meminfo() -> dict[str, int]:
    out = {}
    for line in (read("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "Hugepagesize", "HugePages_Total", "HugePages_Free"):
            out[key] = int(rest.split()[0])
    return out


def cpufreq() -> dict[str, object]:
    policies = {}
    driver = None
    for path in sorted(glob.glob(CPU + "/cpufreq/policy*")):
        name = os.path.basename(path)
        policies[name] = {
            "governor": read_line(path + "/scaling_governor"),
            "available": (read_line(path + "/scaling_available_governors") or "").split(),
            "epp": read_line(path + "/energy_performance_preference"),
        }
        driver = driver or read_line(path + "/scaling_driver")
    return {"driver": driver, "policies": policies}


def cpuidle() -> dict[str, object]:
    states = []
    for path in sorted(
        glob.glob(CPU + "/cpu0/cpuidle/state*"), key=lambda p: int(p.rsplit("state", 1)[1])
    ):
        latency = read_line(path + "/latency")
        states.append(
            {
                "name": read_line(path + "/name"),
                "desc": read_line(path + "/desc"),
                "latency": int(latency) if latency and latency.isdigit() else None,
                "disabled": read_line(path + "/disable") == "1",
            }
        )
    return {
        "driver": read_line(CPU + "/cpuidle/current_driver"),
        "governor": read_line(CPU + "/cpuidle/current_governor")
        or read_line(CPU + "/cpuidle/current_governor_ro"),
        "states": states,
    }


def cpu_vendor() -> str | None:
    for line in (read("/proc/cpuinfo", 65536) or "").splitlines():
        if line.startswith(("vendor_id", "CPU implementer")):
            return line.split(":", 1)[1].strip()
    return None


def intel_pstate() -> dict[str, str | None] | None:
    if not os.path.isdir(CPU + "/intel_pstate"):
        return None
    return {
        "status": read_line(CPU + "/intel_pstate/status"),
        "no_turbo": read_line(CPU + "/intel_pstate/no_turbo"),
    }


def boot_configs() -> tuple[dict[str, dict[str, object]], bool]:
    configs: dict[str, dict[str, object]] = {}
    for path in list(GRUB_CFGS) + sorted(glob.glob("/boot/efi/EFI/*/grub.cfg")):
        text = read(path)
        if text is None:
            continue
        options = [m.group(1).strip() for m in map(LINUX_LINE.match, text.splitlines()) if m]
        configs[path] = {"stub": not options and "configfile" in text, "options": options}
    kernelopts = ""
    for line in (read("/boot/grub2/grubenv") or read("/boot/grub/grubenv") or "").splitlines():
        if line.startswith("kernelopts="):
            kernelopts = line.split("=", 1)[1]
    entries = sorted(glob.glob("/boot/loader/entries/*.conf"))
    for path in entries:
        options = []
        for line in (read(path) or "").splitlines():
            if line.startswith("options"):
                options.append(line[len("options") :].strip().replace("$kernelopts", kernelopts))
        configs[path] = {"stub": False, "options": options}
    return configs, bool(entries)


def dmidecode(module: AnsibleModule) -> dict[str, object]:
    binary = module.get_bin_path("dmidecode")
    if not binary or os.geteuid() != 0 or not os.path.exists("/sys/firmware/dmi"):
        return {"available": False, "processors": []}
    rc, out, _err = module.run_command([binary, "-t", "processor"])
    if rc != 0:
        return {"available": False, "processors": []}
    processors = []
    for block in out.split("\n\n"):
        if "Processor Information" not in block or "Status: Unpopulated" in block:
            continue
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.strip().partition(": ")
            if sep:
                fields[key] = value.strip()
        processors.append(
            {
                "socket": fields.get("Socket Designation"),
                "version": fields.get("Version"),
                "current_speed": fields.get("Current Speed"),
                "max_speed": fields.get("Max Speed"),
            }
        )
    return {"available": True, "processors": processors}


def boot_time() -> float | None:
    """When PID 1 started: the boot of this host, or of this container."""
    btime = None
    for line in (read("/proc/stat", 65536) or "").splitlines():
        if line.startswith("btime "):
            btime = int(line.split()[1])
    stat = read("/proc/1/stat", 4096)
    if btime is None or not stat:
        return None
    ticks = int(stat.rpartition(")")[2].split()[19])
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def file_info(path: str) -> dict[str, object]:
    try:
        return {"exists": True, "mtime": os.stat(path).st_mtime}
    except OSError:
        return {"exists": False, "mtime": None}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysctls": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    configs, bls = boot_configs()
    sysctl = {}
    for key in params["sysctls"]:
        sysctl[key] = read_line("/proc/sys/" + key.replace(".", "/"))
    module.exit_json(
        changed=False,
        cmdline=read_line("/proc/cmdline") or "",
        arch=platform.machine(),
        container=container_hint(),
        efi=os.path.isdir("/sys/firmware/efi"),
        writable={
            "proc_sys": not mounted_read_only("/proc/sys"),
            "sys": not mounted_read_only(CPU),
        },
        sysctl=sysctl,
        meminfo=meminfo(),
        cpu={
            "vendor": cpu_vendor(),
            "cpufreq": cpufreq(),
            "intel_pstate": intel_pstate(),
            "cpuidle": cpuidle(),
        },
        grub={
            "tools": {
                name: module.get_bin_path(name)
                for name in ("update-grub", "grub-mkconfig", "grub2-mkconfig", "grubby")
            },
            "default_grub": read("/etc/default/grub"),
            "configs": configs,
            "bls": bls,
        },
        dmi={key: read_line("/sys/class/dmi/id/" + key) for key in DMI_KEYS},
        dmidecode=dmidecode(module),
        files={path: file_info(path) for path in params["files"]},
        boot_time=boot_time(),
        units={
            unit: any(os.path.exists(os.path.join(d, unit)) for d in UNIT_DIRS)
            for unit in params["units"]
        },
    )


if __name__ == "__main__":
    main()
