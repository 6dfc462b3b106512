"""The role's variables (``host_tuning_*``, gathered in roles/host_tuning/vars/main.yml as
``host_tuning_inputs``): type and range checks and the resolved settings.

Nothing here needs a host: roles/host_tuning/tasks/check.yml runs :func:`settings` on the
controller before any host is contacted. Bad input raises AcceldeployError naming the variable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.hosttuning import kernelargs
from acceldeploy.inventory import bounds

SYSCTL_KEY = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_\-]+)+$")
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\-]+$")
INPUT_PREFIX = "host_tuning_"
# The kernel's cpufreq governors (drivers/cpufreq/cpufreq_*.c).
CPUFREQ_GOVERNORS = frozenset(
    {"performance", "powersave", "schedutil", "ondemand", "conservative", "userspace"}
)


# --------------------------------------------------------------------------- value checks


def _var(name: str) -> str:
    return INPUT_PREFIX + name


def as_bool(value: Any, name: str) -> bool:
    return bounds.flag(value, _var(name))


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


def as_path(value: Any, name: str) -> str:
    text = as_str(value, name)
    if not text.startswith("/"):
        raise AcceldeployError(f"{_var(name)}: {text!r} is not an absolute path")
    return text


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


# --------------------------------------------------------------------------- settings


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# One step per variable (or per group of variables checked together): it reads the inputs and
# returns the Settings fields it resolves. settings() runs them in this order, so with several
# bad variables the first one named is always the same.
Step = Callable[[Mapping[str, Any]], dict[str, Any]]


def _platform(inputs: Mapping[str, Any]) -> dict[str, Any]:
    profiles = as_mapping(inputs.get("profiles"), "profiles")
    platform = as_str(inputs.get("platform"), "platform")
    if platform not in profiles:
        known = ", ".join(sorted(profiles)) or "(none: host_tuning_profiles is empty)"
        raise AcceldeployError(
            f"acceldeploy_platform (host_tuning_platform) is {platform!r}: set it to one of {known}"
        )
    return {"platform": platform}


def _kernel_args_conditional(inputs: Mapping[str, Any]) -> dict[str, Any]:
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
    return {"kernel_args_conditional": conditional}


def _kernel_args(inputs: Mapping[str, Any]) -> dict[str, Any]:
    args = kernelargs.check_args(
        [
            *as_list(inputs.get("kernel_args"), "kernel_args"),
            *as_list(inputs.get("kernel_args_extra"), "kernel_args_extra"),
        ],
        "host_tuning_kernel_args / host_tuning_kernel_args_extra",
    )
    return {"kernel_args": args}


def _governor(inputs: Mapping[str, Any]) -> dict[str, Any]:
    governor = as_str(inputs.get("governor"), "governor")
    if governor and governor not in CPUFREQ_GOVERNORS:
        raise AcceldeployError(
            f"host_tuning_governor: {governor!r} is not a cpufreq governor name; use one of "
            + ", ".join(sorted(CPUFREQ_GOVERNORS))
        )
    return {"governor": governor}


def _redfish(inputs: Mapping[str, Any]) -> dict[str, Any]:
    given = as_str(inputs.get("bios_redfish_endpoint"), "bios_redfish_endpoint")
    endpoint = given.rstrip("/")
    attributes = as_mapping(inputs.get("bios_redfish_attributes"), "bios_redfish_attributes")
    credentials = as_bool(inputs.get("bios_redfish_credentials"), "bios_redfish_credentials")
    # Any non-empty value switches Redfish on (tasks/main.yml reads the variable itself).
    if given:
        if not re.match(r"^https?://[^/\s]+$", endpoint):
            raise AcceldeployError(
                f"host_tuning_bios_redfish_endpoint: {endpoint or given!r} is not a BMC base URL "
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
    return {
        "redfish_endpoint": endpoint,
        "redfish_credentials": credentials,
        "redfish_system": system.rstrip("/"),
        "redfish_attributes": attributes,
    }


def _grub_cfg(inputs: Mapping[str, Any]) -> dict[str, Any]:
    grub_cfg = as_str(inputs.get("grub_cfg"), "grub_cfg")
    if grub_cfg and not grub_cfg.startswith("/"):
        raise AcceldeployError(f"host_tuning_grub_cfg: {grub_cfg!r} is not an absolute path")
    return {"grub_cfg": grub_cfg}


def _switch(name: str) -> Step:
    """A true/false variable (the role's `when:` lines read it with `| bool`)."""
    return lambda inputs: {name: as_bool(inputs.get(name), name)}


def _number(name: str, minimum: int, maximum: int | None = None) -> Step:
    return lambda inputs: {name: as_int(inputs.get(name), name, minimum, maximum)}


def _path(name: str) -> Step:
    return lambda inputs: {name: as_path(inputs.get(name), name)}


def _units(name: str) -> Step:
    return lambda inputs: {name: unit_names(inputs.get(name), name)}


# More 2 MiB pages (the smallest hugepage size of the supported hosts) than 16 TiB, beyond
# the memory of any host the toolkit deploys to: refused on the controller, before the host's
# own memory is read (planning.hugepages_check bounds it by that, after contact).
HUGEPAGE_MIB = 2
HUGEPAGES_MAX_TIB = 16
HUGEPAGES_MAX = HUGEPAGES_MAX_TIB * (1 << 20) // HUGEPAGE_MIB


def _hugepages(inputs: Mapping[str, Any]) -> dict[str, Any]:
    count = as_int(inputs.get("hugepages"), "hugepages", minimum=0)
    if count > HUGEPAGES_MAX:
        raise AcceldeployError(
            f"host_tuning_hugepages: {count} pages of at least {HUGEPAGE_MIB} MiB is more than "
            f"{HUGEPAGES_MAX_TIB} TiB, beyond the memory of any supported host; give "
            f"{HUGEPAGES_MAX} or less: the number of pages, not bytes (4096 pages = 8 GiB)"
        )
    return {"hugepages": count}


def _sysctls(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "sysctls": {
            **sysctl_map(inputs.get("sysctls"), "sysctls"),
            **sysctl_map(inputs.get("sysctls_extra"), "sysctls_extra"),
        }
    }


STEPS: tuple[Step, ...] = (
    _platform,
    _kernel_args_conditional,
    _kernel_args,
    _governor,
    _redfish,
    _grub_cfg,
    _switch("kernel_args_enabled"),
    _path("grub_dropin"),
    _switch("sysctls_enabled"),
    _sysctls,
    _path("sysctl_file"),
    _switch("hugepages_enabled"),
    _hugepages,
    _number("hugepages_max_percent", minimum=1, maximum=95),
    _path("hugepages_file"),
    _switch("governor_enabled"),
    _units("governor_disable_units"),
    _switch("bios_audit_enabled"),
    _switch("reboot"),
    _number("reboot_batch", minimum=1),
    _number("reboot_max_fail_percentage", minimum=0, maximum=100),
    _number("reboot_timeout", minimum=60, maximum=86400),
    _units("reboot_services"),
)


def settings(inputs: Mapping[str, Any]) -> Settings:
    """Check every input and resolve the platform profile; errors name the variable."""
    fields: dict[str, Any] = {}
    for step in STEPS:
        fields.update(step(inputs))
    return Settings(**fields)
