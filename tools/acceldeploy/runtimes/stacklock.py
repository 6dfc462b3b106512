"""The stack lock at first contact: the host's driver, firmware and CANN judged against its
stack by preflight's one read-only probe, before any host changes.

Only the host knows these versions. Preflight's first contact (roles/preflight, the ``raw``
probe of ``acceldeploy.inventory.targets``) reads them in the same places the runtime roles'
probe does (the role's own variables: ``ascend_runtime_driver_info``,
``ascend_runtime_firmware_info``, ``ascend_runtime_toolkit_info``, ``gaudi_runtime_hl_smi``)
into the same shape, and this module runs the runtime checks' version checks on it
(``ascend.ASCEND_VERSION_CHECKS``, ``gaudi.GAUDI_VERSION_CHECKS``): one parser and one rule for
each part, so preflight refuses exactly what the runtime check would, only earlier. The
runtime checks still run them at the runtime stage (defence in depth; the host may have
changed in between).

``inputs["runtime"]`` is ``{platform, stack, options}``: the host's stack (its
``acceldeploy_stack`` or the platform's default) and the runtime role's checked options, as
the role's ``validate`` set them in preflight. Other platforms (cpu) read nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import roledefaults, targets
from acceldeploy.platforms import for_name
from acceldeploy.platforms.ascend.runtime import (
    ASCEND_VERSION_CHECKS,
    AscendHost,
    check_cann_version,
)
from acceldeploy.platforms.gaudi.runtime import GAUDI_VERSION_CHECKS, GaudiHost
from acceldeploy.platforms.probe import CheckRun

Host = TypeVar("Host", bound=CheckRun)


@dataclass(frozen=True)
class VersionCheck:
    """A runtime role's version checks and what the first contact reads for them."""

    files: tuple[str, ...]  # each read where the role's <name>_info option says
    commands: tuple[str, ...]  # each run as the role's <name> option says
    run: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], CheckRun]
    # The other options its checks read (the upgrade advisor takes them from the inventory).
    switches: tuple[str, ...] = ()
    # What the upgrade advisor runs on a host read before a move: the checks but the one
    # the advisor says itself from the inventory (whether the role installs another CANN).
    move_run: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], CheckRun] | None = None


def _checked(host: Host, checks: Sequence[Callable[[Host], None]]) -> Host:
    for check in checks:
        check(host)
    return host


def _ascend(probe: dict[str, Any], stack: dict[str, Any], options: dict[str, Any]) -> CheckRun:
    return _checked(AscendHost(probe=probe, stack=stack, options=options), ASCEND_VERSION_CHECKS)


def _ascend_move(probe: dict[str, Any], stack: dict[str, Any], options: dict[str, Any]) -> CheckRun:
    checks = [c for c in ASCEND_VERSION_CHECKS if c is not check_cann_version]
    return _checked(AscendHost(probe=probe, stack=stack, options=options), checks)


def _gaudi(probe: dict[str, Any], stack: dict[str, Any], options: dict[str, Any]) -> CheckRun:
    return _checked(GaudiHost(probe=probe, stack=stack, options=options), GAUDI_VERSION_CHECKS)


# By the runtime role a platform's class names: Ascend's driver and firmware version.info and
# CANN's ascend_toolkit_install.info; Gaudi's ``hl-smi``, whose version lines the runtime
# check parses.
VERSION_CHECKS = {
    "ascend_runtime": VersionCheck(
        files=("driver", "firmware", "toolkit"),
        commands=(),
        run=_ascend,
        switches=("check_driver", "check_firmware"),
        move_run=_ascend_move,
    ),
    "gaudi_runtime": VersionCheck(
        files=(), commands=("hl_smi",), run=_gaudi, switches=("software", "driver_match")
    ),
}


def _runtime(inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    runtime = inputs.get("runtime") or {}
    return (
        str(runtime.get("platform") or ""),
        dict(runtime.get("stack") or {}),
        dict(runtime.get("options") or {}),
    )


def _check(platform: str) -> VersionCheck | None:
    """The version check of the platform's runtime role; none without a runtime (preflight
    passes none for cpu hosts)."""
    role = for_name(platform).runtime_role if platform else None
    return VERSION_CHECKS[role] if role else None


def reads(inputs: Mapping[str, Any]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(files, commands) the first contact reads for the host's platform's version check."""
    platform, _, options = _runtime(inputs)
    check = _check(platform)
    if check is None:
        return {}, {}
    files = {name: _patterns(options, name, f"{name}_info") for name in check.files}
    commands = {name: _patterns(options, name, name) for name in check.commands}
    return files, commands


def _patterns(options: Mapping[str, Any], what: str, key: str) -> list[str]:
    """The role's own setting (its options carry the role's variables, not a copy here)."""
    value = options.get(key)
    if not value:
        raise AcceldeployError(
            f"the runtime role's options have no {key} (where the {what} is read): "
            "roles/*_runtime/vars/main.yml passes it"
        )
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def probe_script(inputs: Mapping[str, Any]) -> str:
    """The first contact's shell probe: the target's facts and the stack's versions."""
    files, commands = reads(inputs)
    return targets.probe_script(targets.probe_pythons(inputs), files, commands)


def judge(facts: targets.Facts, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime check's version checks on what the first contact read: {stack, platform,
    detected, errors, warnings}; empty for a platform without a runtime check."""
    platform, stack, options = _runtime(inputs)
    check = _check(platform)
    if check is None:
        return {}
    host = check.run(facts.probe(), stack, options)
    detected = {k: v for k, v in host.detected.items() if k != "devices"}
    return {
        "stack": str(stack.get("name") or ""),
        "platform": platform,
        "detected": detected,
        "errors": list(host.verdict.errors),
        "warnings": list(host.verdict.warnings),
    }


def check(stdout: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """targets.check, and the stack lock: ``stack_lock`` holds what was read and judged, its
    refusals are among ``errors``."""
    result = targets.check(stdout, inputs)
    lock = judge(targets.Facts.parse(stdout), inputs)
    return {**result, "stack_lock": lock, "errors": result["errors"] + lock.get("errors", [])}


def inventory_inputs(
    hostvars: Mapping[str, Any], platform: str, stack: Mapping[str, Any], in_image: bool
) -> dict[str, Any]:
    """The first contact's inputs for a host of the inventory, without Ansible: its runtime
    role's reads and switches from the host's variables (else the role's defaults), judged
    against ``stack`` (``in_image``: the host runs the stack's image); empty for a platform
    without a runtime check."""
    check = _check(platform)
    if check is None:
        return {}
    role = str(for_name(platform).runtime_role)
    keys = [f"{name}_info" for name in check.files] + [*check.commands, *check.switches]
    options = {key: roledefaults.rendered(hostvars, f"{role}_{key}") for key in keys}
    options["container"] = in_image
    return {
        "runtime": {"platform": platform, "stack": dict(stack), "options": options},
        "ansible_python": str(hostvars.get("ansible_python_interpreter") or ""),
    }


def read_for_move(stdout: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """What a host holds, read by ``probe_script(inputs)``, judged against the stack it would
    move to: {detected, errors, warnings} (the advisor's own CANN finding left out)."""
    platform, stack, options = _runtime(inputs)
    check = _check(platform)
    if check is None:
        return {}
    host = (check.move_run or check.run)(targets.Facts.parse(stdout).probe(), stack, options)
    return {
        "detected": {k: v for k, v in host.detected.items() if k != "devices"},
        "errors": list(host.verdict.errors),
        "warnings": list(host.verdict.warnings),
    }
