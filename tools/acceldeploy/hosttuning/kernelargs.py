"""Kernel command-line arguments: parse, compare with /proc/cmdline, and plan the GRUB change.

Everything here is pure: the role probes the host (plugins/modules/host_tuning_probe.py),
passes what it saw through plugins/filter/host_tuning_filters.py, and only prints what comes
back. Two families are handled:

- Debian / Ubuntu: a drop-in ``/etc/default/grub.d/<name>.cfg`` appending to
  ``GRUB_CMDLINE_LINUX_DEFAULT``, then ``update-grub`` (``/boot/grub/grub.cfg`` for BIOS and
  UEFI alike: the EFI partition's grub.cfg only points there).
- openEuler / EulerOS / Kylin / RHEL and friends: ``GRUB_CMDLINE_LINUX`` in
  ``/etc/default/grub`` (there is no grub.d there), then ``grub2-mkconfig -o`` the file GRUB
  really reads: ``/boot/grub2/grub.cfg`` on BIOS, ``/boot/efi/EFI/<vendor>/grub.cfg`` on UEFI
  unless that file is only a stub that ``configfile``s ``/boot/grub2/grub.cfg`` (RHEL 9,
  Fedora 34+). Where boot entries are BootLoaderSpec files, ``grubby --update-kernel=ALL``
  writes the arguments into every entry too.

A reboot is needed when a wanted argument is not in ``/proc/cmdline``, which is read on every
run, so a reboot that was skipped is still noticed next time.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError

DEBIAN_CFG = "/boot/grub/grub.cfg"
GRUB2_CFG = "/boot/grub2/grub.cfg"
EFI_ROOT = "/boot/efi/EFI"
DEFAULT_GRUB = "/etc/default/grub"

DEBIAN_FAMILIES = frozenset({"Debian"})
REDHAT_FAMILIES = frozenset({"RedHat", "openEuler", "EulerOS", "Kylin", "Kylin Linux"})
# The EFI directory each RPM distribution installs GRUB into, for when none is found yet.
EFI_VENDOR_DIRS: dict[str, str] = {
    "openeuler": "openEuler",
    "euleros": "euleros",
    "kylin": "kylin",
    "kylin linux advanced server": "kylin",
    "redhat": "redhat",
    "rhel": "redhat",
    "centos": "centos",
    "rocky": "rocky",
    "almalinux": "almalinux",
    "oraclelinux": "redhat",
    "fedora": "fedora",
    "anolis": "anolis",
}
# Arguments that only mean something to an x86 kernel; dropped (and reported) elsewhere.
X86_ONLY_PREFIXES = ("intel_idle.", "intel_iommu", "intel_pstate", "processor.max_cstate")
ARG_TEXT = re.compile(r"^[A-Za-z0-9_.\-]+(=[^\s\"'\\$`]*)?$")


@dataclass(frozen=True)
class KernelArg:
    """One ``key`` or ``key=value`` of a kernel command line."""

    key: str
    value: str | None = None

    @classmethod
    def parse(cls, text: str) -> KernelArg:
        key, sep, value = text.partition("=")
        return cls(key, value if sep else None)

    def __str__(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"


def split_cmdline(cmdline: str) -> list[str]:
    """The kernel's own words of a command line: quotes kept together, init args dropped."""
    try:
        words = shlex.split(cmdline)
    except ValueError:
        words = cmdline.split()
    if "--" in words:
        words = words[: words.index("--")]
    return words


def effective(cmdline: str | Sequence[str]) -> dict[str, str | None]:
    """key -> value as the kernel sees it (the last occurrence of a key wins)."""
    words = split_cmdline(cmdline) if isinstance(cmdline, str) else list(cmdline)
    seen: dict[str, str | None] = {}
    for word in words:
        arg = KernelArg.parse(word)
        seen[arg.key] = arg.value
    return seen


def missing(wanted: Iterable[str], cmdline: str | Sequence[str]) -> list[str]:
    """The wanted arguments that ``cmdline`` does not (or not with that value) carry."""
    have = effective(cmdline)
    out = []
    for text in wanted:
        arg = KernelArg.parse(text)
        if arg.key not in have or (arg.value is not None and have[arg.key] != arg.value):
            out.append(str(arg))
    return out


def merge(current: str, wanted: Iterable[str]) -> str:
    """``current`` with every wanted argument present: values replaced in place, new ones
    appended, everything else (order, other arguments) kept."""
    words = split_cmdline(current)
    for text in wanted:
        arg = KernelArg.parse(text)
        positions = [i for i, w in enumerate(words) if KernelArg.parse(w).key == arg.key]
        if not positions:
            words.append(str(arg))
            continue
        for i in positions[:-1]:
            words[i] = ""
        words[positions[-1]] = str(arg)
    return " ".join(w for w in words if w)


def check_args(args: Iterable[Any], variable: str) -> list[str]:
    """Kernel arguments as clean strings, or an error naming ``variable``."""
    out: list[str] = []
    for raw in args:
        if not isinstance(raw, str) or not ARG_TEXT.match(raw):
            raise AcceldeployError(
                f"{variable}: {raw!r} is not a kernel argument; give plain key or key=value "
                "words without spaces, quotes or shell characters"
            )
        if raw not in out:
            out.append(raw)
    return out


def for_architecture(args: Sequence[str], arch: str) -> tuple[list[str], list[dict[str, str]]]:
    """(kept, dropped-with-reason): x86-only arguments are dropped on other architectures."""
    if arch in ("x86_64", "amd64", "i386", "i686"):
        return list(args), []
    kept, dropped = [], []
    for arg in args:
        if arg.startswith(X86_ONLY_PREFIXES):
            dropped.append({"arg": arg, "reason": f"x86 only, host is {arch}"})
        else:
            kept.append(arg)
    return kept, dropped


def grub_family(os_family: str, distribution: str) -> str | None:
    """'debian', 'redhat' or None (not handled)."""
    if os_family in DEBIAN_FAMILIES:
        return "debian"
    if os_family in REDHAT_FAMILIES or distribution.lower() in EFI_VENDOR_DIRS:
        return "redhat"
    return None


@dataclass(frozen=True)
class GrubFacts:
    """What the probe saw of the boot loader (see host_tuning_probe.py)."""

    os_family: str
    distribution: str
    efi: bool
    tools: Mapping[str, str | None] = field(default_factory=dict)
    default_grub: str | None = None
    # path -> {"stub": bool, "options": [kernel option strings of its linux lines]}
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    bls: bool = False

    @classmethod
    def from_probe(cls, facts: Mapping[str, Any], probe: Mapping[str, Any]) -> GrubFacts:
        grub = probe.get("grub") or {}
        return cls(
            os_family=str(facts.get("os_family") or ""),
            distribution=str(facts.get("distribution") or ""),
            efi=bool(probe.get("efi")),
            tools=dict(grub.get("tools") or {}),
            default_grub=grub.get("default_grub"),
            configs=dict(grub.get("configs") or {}),
            bls=bool(grub.get("bls")),
        )


@dataclass(frozen=True)
class GrubPlan:
    """Which file to write, with what, which config GRUB reads, and how to regenerate it."""

    family: str
    mode: str  # "dropin" (Debian grub.d file) or "default_grub" (edit /etc/default/grub)
    path: str  # the file the role writes
    variable: str  # the shell variable in it
    value: str  # for "dropin": the appended words; for "default_grub": the full new value
    cfg_path: str  # the grub.cfg GRUB reads at boot
    commands: list[list[str]]  # regenerate, in order
    write: bool  # the file lacks an argument (a drop-in is always written: it is the source)
    config_stale: bool  # the boot config lacks an argument although the file may be right
    bootloader_found: bool
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def grub_variable_value(text: str | None, variable: str) -> str:
    """The last assignment of ``variable`` in a /etc/default/grub text ('' when absent)."""
    value = ""
    for line in (text or "").splitlines():
        match = re.match(rf"^\s*{re.escape(variable)}=(.*)$", line)
        if match:
            words = shlex.split(match.group(1), comments=True) or [""]
            value = words[0]
    return value


def efi_cfg_path(facts: GrubFacts) -> tuple[str, list[str]]:
    """The grub.cfg GRUB reads on a UEFI RPM-family host, and why."""
    found = {
        path: info
        for path, info in facts.configs.items()
        if path.startswith(EFI_ROOT + "/") and not path.startswith(f"{EFI_ROOT}/BOOT/")
    }
    vendor = EFI_VENDOR_DIRS.get(facts.distribution.lower())
    preferred = f"{EFI_ROOT}/{vendor}/grub.cfg" if vendor else None
    if preferred and preferred in found:
        chosen = preferred
    elif found:
        chosen = sorted(found)[0]
    else:
        if preferred is None:
            raise AcceldeployError(
                f"UEFI host running {facts.distribution!r}: no {EFI_ROOT}/*/grub.cfg found and "
                "no known EFI directory for it; set host_tuning_grub_cfg to the grub.cfg "
                "GRUB reads"
            )
        return preferred, [f"no grub.cfg under {EFI_ROOT} yet: using {preferred}"]
    if found[chosen].get("stub"):
        return GRUB2_CFG, [f"{chosen} only loads {GRUB2_CFG}: regenerating that"]
    return chosen, []


def config_has(facts: GrubFacts, cfg_paths: Sequence[str], wanted: Sequence[str]) -> bool:
    """Some boot entry in the given configs (or the BLS entries) carries every argument."""
    options: list[str] = []
    for path in cfg_paths:
        options.extend((facts.configs.get(path) or {}).get("options") or [])
    if facts.bls:
        for path, info in facts.configs.items():
            if path.startswith("/boot/loader/entries/"):
                options.extend(info.get("options") or [])
    return any(not missing(wanted, line) for line in options)


def grub_plan(
    facts: GrubFacts,
    wanted: Sequence[str],
    dropin_path: str,
    cfg_override: str = "",
) -> GrubPlan:
    """Plan the persistent kernel-argument change for one host."""
    family = grub_family(facts.os_family, facts.distribution)
    tools = {k: v for k, v in facts.tools.items() if v}
    notes: list[str] = []
    if family == "debian":
        cfg = cfg_override or DEBIAN_CFG
        if "update-grub" in tools and not cfg_override:
            commands = [[str(tools["update-grub"])]]
        else:
            mkconfig = str(tools.get("grub-mkconfig") or "grub-mkconfig")
            commands = [[mkconfig, "-o", cfg]]
        found = cfg in facts.configs
        return GrubPlan(
            family="debian",
            mode="dropin",
            path=dropin_path,
            variable="GRUB_CMDLINE_LINUX_DEFAULT",
            value=" ".join(wanted),
            cfg_path=cfg,
            commands=commands,
            write=True,
            config_stale=found and not config_has(facts, [cfg], wanted),
            bootloader_found=found,
            notes=notes,
        )
    if family == "redhat":
        if cfg_override:
            cfg = cfg_override
        elif facts.efi:
            cfg, notes = efi_cfg_path(facts)
        else:
            cfg = GRUB2_CFG
        mkconfig = str(tools.get("grub2-mkconfig") or "grub2-mkconfig")
        commands = [[mkconfig, "-o", cfg]]
        if facts.bls and "grubby" in tools:
            commands.append(
                [str(tools["grubby"]), "--update-kernel=ALL", f"--args={' '.join(wanted)}"]
            )
            notes.append("BootLoaderSpec entries: grubby writes the arguments into each entry")
        current = grub_variable_value(facts.default_grub, "GRUB_CMDLINE_LINUX")
        found = cfg in facts.configs or facts.bls
        return GrubPlan(
            family="redhat",
            mode="default_grub",
            path=DEFAULT_GRUB,
            variable="GRUB_CMDLINE_LINUX",
            value=merge(current, wanted),
            cfg_path=cfg,
            commands=commands,
            write=bool(missing(wanted, current)),
            config_stale=found and not config_has(facts, [cfg], wanted),
            bootloader_found=found,
            notes=notes,
        )
    raise AcceldeployError(
        f"kernel arguments: GRUB handling for os_family {facts.os_family!r} "
        f"({facts.distribution}) is not known; set host_tuning_kernel_args_enabled: false "
        "for this host and set the arguments yourself"
    )
