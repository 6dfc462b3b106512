"""Host checks: one SSH round trip collects the facts, pure functions judge them.

What "tuned" means is read from what roles/host_tuning persisted on the host (its GRUB
drop-in and sysctl files, at the paths the host's host_tuning_* variables give), so verify
checks that the persisted settings are in effect without a second copy of the role's defaults.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.inventory.roledefaults import value
from acceldeploy.platforms import HEALTHY, for_name
from acceldeploy.verify.model import Check


@dataclass(frozen=True)
class TunedFiles:
    """Where host_tuning persisted its settings on this host."""

    grub_dropin: str
    sysctl_files: tuple[str, ...]

    @classmethod
    def from_hostvars(cls, hostvars: Mapping[str, Any]) -> TunedFiles:
        return cls(
            grub_dropin=str(value(hostvars, "host_tuning_grub_dropin")),
            sysctl_files=(
                str(value(hostvars, "host_tuning_sysctl_file")),
                str(value(hostvars, "host_tuning_hugepages_file")),
            ),
        )


# Runs on the host with its python3; prints one JSON object. Only reads.
COLLECT = r"""
import glob, json, os, subprocess, sys
units = json.loads(sys.argv[1])
paths = json.loads(sys.argv[2])
def run(*argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return {"rc": p.returncode, "out": p.stdout[-20000:], "err": p.stderr[-2000:]}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": None, "out": "", "err": str(exc)}
def read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None
facts = {
    "cmdline": read("/proc/cmdline") or "",
    "virt": run("systemd-detect-virt", "--container")["out"].strip(),
    "grub_dropin": read(paths["grub_dropin"]),
    "sysctl_files": {p: read(p) for p in paths["sysctl_files"] if os.path.exists(p)},
    "governors": sorted({(read(p) or "").strip() for p in
                         glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")}),
    "units": {},
    "smi": {},
}
keys = {}
for text in facts["sysctl_files"].values():
    for line in (text or "").splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            keys[line.split("=", 1)[0].strip()] = None
facts["sysctl_live"] = {k: (read("/proc/sys/" + k.replace(".", "/")) or "").strip() or None
                        for k in keys}
for unit in units:
    show = run("systemctl", "show", unit + ".service", "-p", "ActiveState,SubState,"
               "UnitFileState,NRestarts,MainPID,ExecMainStartTimestampMonotonic,Result,"
               "ControlGroup,LoadState")
    props = dict(l.split("=", 1) for l in show["out"].splitlines() if "=" in l)
    errors = run("journalctl", "-u", unit + ".service", "-p", "err", "--since", "-15min",
                 "-o", "cat", "--no-pager", "-n", "5")
    cg = props.get("ControlGroup") or ""
    memory = read("/sys/fs/cgroup" + cg + "/memory.current") if cg else None
    props["journal_errors"] = [l for l in errors["out"].splitlines() if l.strip()]
    props["memory_current"] = int(memory) if memory and memory.strip().isdigit() else None
    facts["units"][unit] = props
for tool, argv in (("npu-smi", ["npu-smi", "info"]), ("hl-smi", ["hl-smi"])):
    if any(os.access(os.path.join(d, tool), os.X_OK)
           for d in os.environ.get("PATH", "/usr/bin:/usr/local/bin").split(":")):
        facts["smi"][tool] = run(*argv)
print(json.dumps(facts))
"""


def collect_script(units: list[str], files: TunedFiles) -> tuple[str, list[str]]:
    """The script and its arguments (the unit names, the tuned files) for `python3 - ARGS`."""
    paths = {"grub_dropin": files.grub_dropin, "sysctl_files": list(files.sysctl_files)}
    return COLLECT, [json.dumps(units), json.dumps(paths)]


def remote_command(units: list[str], files: TunedFiles) -> str:
    script, args = collect_script(units, files)
    return "python3 -c " + " ".join(shlex.quote(a) for a in [script, *args])


def _in_container(facts: dict[str, Any]) -> bool:
    return facts.get("virt", "") not in ("", "none")


def wanted_kernel_args(dropin: str | None) -> list[str]:
    if not dropin:
        return []
    match = re.search(r'GRUB_CMDLINE_LINUX_DEFAULT="([^"]*)"', dropin)
    words = match.group(1).split() if match else []
    return [w for w in words if not w.startswith("$")]


def sysctl_wanted(files: dict[str, str | None]) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for text in files.values():
        for line in (text or "").splitlines():
            if "=" in line and not line.lstrip().startswith(("#", ";")):
                key, value = (part.strip() for part in line.split("=", 1))
                wanted[key] = value
    return wanted


def _kernel_args(host: str, facts: dict[str, Any], container: bool) -> Check:
    wanted = wanted_kernel_args(facts.get("grub_dropin"))
    if not wanted:
        return Check(
            host, "kernel_args", "skip", "no acceldeploy GRUB drop-in", "run playbooks/host.yml"
        )
    missing = [a for a in wanted if a not in facts.get("cmdline", "").split()]
    if not missing:
        return Check(host, "kernel_args", "pass", " ".join(wanted))
    if container:
        detail = (
            f"container ({facts['virt']}): kernel command line is the machine's; "
            f"persisted {' '.join(wanted)}"
        )
        return Check(host, "kernel_args", "warn", detail)
    fix = "reboot the host (playbooks/host.yml -e host_tuning_reboot=true)"
    return Check(host, "kernel_args", "fail", f"missing {' '.join(missing)}", fix)


def _sysctls(host: str, facts: dict[str, Any], container: bool) -> Check:
    wanted = sysctl_wanted(facts.get("sysctl_files", {}))
    live = facts.get("sysctl_live", {})
    if not wanted:
        return Check(
            host, "sysctls", "skip", "no acceldeploy sysctl files", "run playbooks/host.yml"
        )
    off = {
        k: (v, live.get(k))
        for k, v in wanted.items()
        if " ".join(str(live.get(k) or "").split()) != " ".join(v.split())
    }
    detail = ", ".join(f"{k}={live_v} (want {want})" for k, (want, live_v) in off.items())
    if not off:
        return Check(host, "sysctls", "pass", ", ".join(f"{k}={v}" for k, v in wanted.items()))
    if container:
        return Check(host, "sysctls", "warn", f"container: /proc/sys is the machine's: {detail}")
    return Check(host, "sysctls", "fail", detail, "sysctl --system, or reboot for vm.nr_hugepages")


def _governor(host: str, facts: dict[str, Any]) -> Check:
    governors = facts.get("governors", [])
    if not governors:
        return Check(host, "governor", "skip", "no cpufreq in this host")
    if governors == ["performance"]:
        return Check(host, "governor", "pass", "performance")
    fix = "playbooks/host.yml --tags host_tuning_governor"
    return Check(host, "governor", "fail", f"governors {governors}", fix)


def judge_host(host: str, facts: dict[str, Any]) -> list[Check]:
    container = _in_container(facts)
    return [
        _kernel_args(host, facts, container),
        _sysctls(host, facts, container),
        _governor(host, facts),
    ]


def judge_unit(host: str, service: str, props: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    state = props.get("ActiveState", "unknown")
    if props.get("LoadState") == "not-found":
        return [
            Check(
                host,
                "unit",
                "fail",
                f"{service}.service is not installed",
                "run playbooks/serve.yml",
                service,
            )
        ]
    if state == "active":
        checks.append(
            Check(
                host,
                "unit",
                "pass",
                f"active ({props.get('SubState')}), pid {props.get('MainPID')}",
                service=service,
            )
        )
    else:
        last = (props.get("journal_errors") or ["(no errors in the journal)"])[-1]
        checks.append(
            Check(
                host,
                "unit",
                "fail",
                f"{state} ({props.get('Result')}): {last}",
                f"systemctl status {service}; journalctl -u {service}",
                service,
            )
        )
    enabled = props.get("UnitFileState")
    checks.append(
        Check(
            host,
            "enabled",
            "pass" if enabled == "enabled" else "warn",
            str(enabled),
            "" if enabled == "enabled" else f"systemctl enable {service}",
            service,
        )
    )
    restarts = int(props.get("NRestarts") or 0)
    checks.append(
        Check(
            host,
            "restarts",
            "pass" if restarts == 0 else "warn",
            f"{restarts} restart(s)",
            "" if not restarts else f"journalctl -u {service} for why it restarted",
            service,
        )
    )
    errors = props.get("journal_errors") or []
    checks.append(
        Check(
            host,
            "journal",
            "pass" if not errors else "warn",
            "no errors in 15 min" if not errors else errors[-1][:300],
            service=service,
        )
    )
    return checks


def judge_devices(
    host: str, platform: str, smi: dict[str, dict[str, Any]], users: list[Any]
) -> list[Check]:
    """The devices ``users`` (services, each with ``devices``) take, visible and healthy,
    from the platform's device tool (npu-smi, hl-smi; read by its class)."""
    behaviour = for_name(platform)
    tool = behaviour.smi
    if tool is None:
        return [Check(host, "devices", "skip", f"platform {platform} has no accelerator")]
    result = smi.get(tool)
    if result is None:
        return [
            Check(
                host,
                "devices",
                "fail",
                f"{tool} not found on the host",
                f"install the driver (playbooks/runtime.yml); {tool} must be on PATH",
            )
        ]
    if result.get("rc") != 0:
        return [
            Check(
                host,
                "devices",
                "fail",
                f"{tool} failed: {result.get('err', '')[:200]}",
                "check the driver: dmesg, the device nodes, the driver version",
            )
        ]
    wanted = sorted({d for user in users for d in user.devices})
    seen = {reading.index: reading.health for reading in behaviour.read_devices(result["out"])}
    bad = {n: seen.get(n, "missing") for n in wanted if seen.get(n) != HEALTHY}
    if bad:
        return [
            Check(
                host,
                "devices",
                "fail",
                f"devices not healthy: {bad}",
                f"{tool} on the host; reset or replace the device",
            )
        ]
    return [Check(host, "devices", "pass", f"{len(seen)} visible, used {wanted} healthy")]
