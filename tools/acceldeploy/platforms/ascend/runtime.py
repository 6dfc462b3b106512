"""Ascend: the driver / firmware / CANN version files, the role's options and the runtime check.

``ascend_check`` judges a host against the pinned stack (CANN == the pinned vllm-ascend's CANN,
driver and firmware compatible, NPUs healthy, device nodes present, the device group, the
CANN environment scripts) and, when asked, plans the CANN ``.run`` install. It is a sequence
of named checks (``ASCEND_CHECKS``) over one ``AscendHost``; each adds its findings.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.platforms import runs_in_image
from acceldeploy.planner.stacks import other_stacks_hint, stack_label
from acceldeploy.platforms.ascend.smi import NpuSmi, parse_npu_smi_info
from acceldeploy.platforms.image import image_options, judge_image
from acceldeploy.platforms.probe import (
    CheckRun,
    Verdict,
    device_node_errors,
    probed_command,
    probed_file,
)
from acceldeploy.platforms.versions import (
    families,
    innerversion_family,
    leading_numbers,
    ranges,
    read_kv,
    same_version,
    version_key,
)

# --------------------------------------------------------------------------------------------
# Version files


def _required_key(kv: Mapping[str, str], key: str, file: str) -> str:
    value = kv.get(key, "")
    if not value:
        raise AcceldeployError(f"{file} has no {key}= line")
    return value


@dataclass(frozen=True)
class AscendDriver:
    version: str
    package_version: str
    innerversion: str
    compatible: tuple[str, ...]
    firmware_ranges: tuple[tuple[str, str], ...]

    @property
    def family(self) -> str:
        return innerversion_family(self.innerversion)

    @classmethod
    def parse(cls, text: str) -> AscendDriver:
        kv = read_kv(text)
        version = kv.get("Version") or kv.get("package_version") or ""
        if not version:
            raise AcceldeployError("driver version.info has no Version= line")
        return cls(
            version=version,
            package_version=kv.get("package_version", version),
            innerversion=kv.get("Innerversion", ""),
            compatible=families(kv.get("compatible_version", "")),
            firmware_ranges=tuple(ranges(kv.get("compatible_version_fw", ""))),
        )


@dataclass(frozen=True)
class AscendFirmware:
    version: str
    package_version: str
    driver_ranges: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> AscendFirmware:
        kv = read_kv(text)
        return cls(
            version=_required_key(kv, "Version", "firmware version.info"),
            package_version=kv.get("package_version", ""),
            driver_ranges=tuple(ranges(kv.get("compatible_version_drv", ""))),
        )


@dataclass(frozen=True)
class CannToolkit:
    version: str
    innerversion: str
    compatible: tuple[str, ...]
    arch: str
    path: str

    @classmethod
    def parse(cls, text: str) -> CannToolkit:
        kv = read_kv(text)
        return cls(
            version=_required_key(kv, "version", "ascend_toolkit_install.info"),
            innerversion=kv.get("innerversion", ""),
            compatible=families(kv.get("compatible_version", "")),
            arch=kv.get("arch", ""),
            path=kv.get("path", ""),
        )


def firmware_in_driver_ranges(firmware: str, driver: AscendDriver) -> bool:
    """A firmware Version (7.5.0.1.129) against the driver's compatible_version_fw ranges,
    compared on the first three numbers."""
    value = leading_numbers(firmware, 3)
    return any(
        leading_numbers(low, 3) <= value <= leading_numbers(high, 3)
        for low, high in driver.firmware_ranges
    )


def driver_in_firmware_ranges(driver_version: str, firmware: AscendFirmware) -> bool:
    """The driver's package version against the firmware's compatible_version_drv: a range
    written ``[24.1,24.1.]`` means every 24.1.x release; others are inclusive ranges."""
    for low, high in firmware.driver_ranges:
        if high == low + ".":
            if driver_version.lower() == low.lower() or driver_version.lower().startswith(
                low.lower() + "."
            ):
                return True
        elif version_key(low) <= version_key(driver_version) <= version_key(high):
            return True
    return False


# --------------------------------------------------------------------------------------------
# CANN packages and the role's options


CANN_PACKAGE = re.compile(
    r"Ascend-cann-(?P<kind>toolkit|kernels(?:-[A-Za-z0-9]+)?|nnal)_(?P<version>[^_]+)_linux"
    r"(?:[-.](?P<arch>x86_64|aarch64))?\.run$",
    re.IGNORECASE,
)
CANN_KINDS = ("toolkit", "kernels", "nnal")
ROLE = "ascend_runtime"


def cann_package(src: str) -> dict[str, str]:
    """What a CANN .run package name says: kind (toolkit|kernels|nnal), version, arch."""
    name = PurePosixPath(src.split("?", 1)[0]).name
    match = CANN_PACKAGE.search(name)
    if not match:
        raise AcceldeployError(
            f"{name!r} is not a CANN package name like "
            "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run"
        )
    kind = match.group("kind").lower()
    return {
        "kind": "kernels" if kind.startswith("kernels") else kind,
        "version": match.group("version"),
        "arch": match.group("arch") or "",
        "name": name,
    }


def _cann_package_errors(
    variable: str, kind: str, meta: dict[str, str], required: str, arch: str
) -> list[str]:
    """What is wrong with a CANN package for this host: another kind, version or arch."""
    errors: list[str] = []
    if meta["kind"] != kind:
        errors.append(f"{variable} is a {meta['kind']} package: {meta['name']}")
    if not same_version(meta["version"], required):
        errors.append(
            f"{variable} is CANN {meta['version']} ({meta['name']}) but the pinned stack "
            f"needs CANN {required}"
        )
    if meta["arch"] and arch and meta["arch"] != arch:
        errors.append(f"{variable} is for {meta['arch']}, this host is {arch}")
    return errors


def _cann_install_step(
    options: dict[str, Any], kind: str, src: str, name: str, toolkit_env: str
) -> dict[str, Any]:
    """Download (if a URL) and run one CANN .run package into ascend_home."""
    download_dir = str(options.get("cann_download_dir") or "/var/cache/acceldeploy/ascend")
    install_path = str(options.get("ascend_home") or "/usr/local/Ascend")
    extra = [str(a) for a in options.get("cann_install_args") or []]
    remote = src.startswith(("http://", "https://"))
    path = f"{download_dir.rstrip('/')}/{name}" if remote else src
    flags = ["--full"] if kind == "toolkit" else ["--install"]
    argv = ["bash", path, *flags, f"--install-path={install_path}", "--quiet", *extra]
    if kind == "nnal":
        # NNAL's installer needs the toolkit's environment (vllm-ascend installation.md).
        argv = ["bash", "-c", f'source {shlex.quote(toolkit_env)} && exec "$@"', "bash", *argv]
    return {"kind": kind, "src": src, "path": path, "download": remote, "argv": argv}


def _cann_install_plan(
    options: dict[str, Any], required: str, arch: str, toolkit_env: str, verdict: Verdict
) -> list[dict[str, Any]]:
    packages = options.get("cann_packages") or {}
    plan: list[dict[str, Any]] = []
    for kind in CANN_KINDS:
        src = str(packages.get(kind) or "")
        variable = f"ascend_runtime_cann_{kind}_package"
        if not src:
            verdict.errors.append(
                f"{variable} is empty: set it to the CANN {required} {kind} .run package "
                "(a path on the host or an internal http(s) URL) to install CANN"
            )
            continue
        try:
            meta = cann_package(src)
        except AcceldeployError as exc:
            verdict.errors.append(f"{variable}: {exc}")
            continue
        verdict.errors.extend(_cann_package_errors(variable, kind, meta, required, arch))
        plan.append(_cann_install_step(options, kind, src, meta["name"], toolkit_env))
    return plan


def cann_move(inputs: Mapping[str, Any], target: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """What moving a host to the stack ``target`` needs of its CANN, from the role's inputs
    alone (ascend_runtime_cann_install and the three packages): (what blocks it, the install
    steps in order). The runtime stage refuses a host whose CANN is not its stack's unless the
    role installs it."""
    required = str(target["cann"])
    given = inputs.get("cann_packages") or {}
    packages = {kind: str(given.get(kind) or "") for kind in CANN_KINDS}
    names = ", ".join(f"ascend_runtime_cann_{kind}_package" for kind in CANN_KINDS)
    if not inputs.get("cann_install"):
        return [
            f"the runtime stage refuses a host whose CANN is not {required}: install CANN "
            f"{required} on the hosts first, or set ascend_runtime_cann_install: true and "
            f"{names} to the CANN {required} .run packages (the role installs them)"
        ], []
    blocks, steps = [], []
    toolkit_env = str(target["env_scripts"][0])
    for kind in CANN_KINDS:
        try:
            _check_cann_package_input(kind, packages[kind], dict(inputs), dict(target))
        except AcceldeployError as exc:
            blocks.append(str(exc))
            continue
        step = _cann_install_step(
            dict(inputs), kind, packages[kind], cann_package(packages[kind])["name"], toolkit_env
        )
        fetch = f"download {step['src']} to {step['path']}, then " if step["download"] else ""
        steps.append(f"{fetch}{shlex.join(step['argv'])}")
    return blocks, steps


def _check_cann_package_input(
    kind: str, src: str, inputs: dict[str, Any], stack_entry: dict[str, Any]
) -> None:
    """One of ascend_runtime_cann_<kind>_package, before any host is touched."""
    required = str(stack_entry["cann"])
    variable = f"ascend_runtime_cann_{kind}_package"
    if inputs.get("cann_install") and not src:
        raise AcceldeployError(
            f"ascend_runtime_cann_install is true but {variable} is empty: give the CANN "
            f"{required} {kind} .run package (a path on the host or an internal URL)"
        )
    if not src:
        return
    if not src.startswith(("/", "http://", "https://")):
        raise AcceldeployError(f"{variable} must be an absolute path or an http(s) URL: {src!r}")
    meta = cann_package(src)
    if meta["kind"] != kind:
        raise AcceldeployError(f"{variable} is a {meta['kind']} package: {meta['name']}")
    if not same_version(meta["version"], required):
        hint = other_stacks_hint(stack_entry, "compatible_cann", meta["version"])
        raise AcceldeployError(
            f"{variable} is CANN {meta['version']} ({meta['name']}) but vllm-ascend "
            f"v{stack_entry['vllm_ascend']} needs CANN {required} (stack "
            f"{stack_entry.get('name', 'ascend')}): give the CANN {required} {kind} package{hint}"
        )


def _check_checksums(checksums: Any) -> None:
    """ascend_runtime_cann_checksums: {toolkit|kernels|nnal: sha256 hex}."""
    if not isinstance(checksums, dict):
        raise AcceldeployError(
            "ascend_runtime_cann_checksums must map toolkit|kernels|nnal to sha256"
        )
    for kind, digest in checksums.items():
        if kind not in CANN_KINDS or not re.fullmatch(r"[0-9a-f]{64}", str(digest).lower()):
            raise AcceldeployError(
                f"ascend_runtime_cann_checksums.{kind} must be the sha256 (64 hex digits) of the "
                f"{'/'.join(CANN_KINDS)} package, got {digest!r}"
            )


def ascend_options(inputs: dict[str, Any], stack_entry: dict[str, Any]) -> dict[str, Any]:
    """The role's inputs checked without touching a host (validate.yml): devices are ints,
    CANN install needs the three packages of the pinned CANN version; fails naming the
    variable. Returns the options ascend_check takes."""
    devices = []
    for device in inputs.get("devices") or []:
        if not str(device).isdigit():
            raise AcceldeployError(f"ascend_runtime_devices: {device!r} is not a device number")
        devices.append(int(device))
    container = runs_in_image("ascend", str(inputs.get("manager") or ""), stack_entry)
    if container and inputs.get("cann_install"):
        raise AcceldeployError(
            "ascend_runtime_cann_install is true but python_env_manager is container: the "
            "stack's image carries CANN; set ascend_runtime_cann_install: false"
        )
    packages = {
        kind: str((inputs.get("cann_packages") or {}).get(kind) or "") for kind in CANN_KINDS
    }
    for kind, src in packages.items():
        _check_cann_package_input(kind, src, inputs, stack_entry)
    _check_checksums(inputs.get("cann_checksums") or {})
    for name in ("env_scripts", "device_nodes", "cann_install_args"):
        value = inputs.get(name) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AcceldeployError(f"ascend_runtime_{name} must be a list of strings")
    pattern = str(inputs.get("device_node_pattern") or "/dev/davinci{index}")
    if "{index}" not in pattern:
        raise AcceldeployError(
            f"ascend_runtime_device_node_pattern must contain {{index}}, got {pattern!r}"
        )
    checked = {**inputs, "devices": sorted(set(devices)), "cann_packages": packages}
    if not container:
        return {**checked, "container": False, "image_probe": {}}
    return {**checked, **image_options(ROLE, inputs, stack_entry), "container": True}


# --------------------------------------------------------------------------------------------
# The runtime check


@dataclass
class AscendHost(CheckRun):
    """One Ascend check run: its inputs, the verdict so far and what the checks found."""

    driver: AscendDriver | None = None
    toolkit: CannToolkit | None = None
    install: list[dict[str, Any]] = field(default_factory=list)
    devices: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    env_scripts: list[str] = field(default_factory=list)

    image: dict[str, Any] = field(default_factory=dict)

    @property
    def in_image(self) -> bool:
        """vLLM runs in the stack's image, which carries CANN: the host needs none."""
        return bool(self.options.get("container"))

    @property
    def required_cann(self) -> str:
        return str(self.stack["cann"])

    @property
    def cann_ok(self) -> bool:
        """The installed CANN is the pinned one."""
        return self.toolkit is not None and same_version(self.toolkit.version, self.required_cann)

    @property
    def wanted(self) -> list[int]:
        """The devices the services use."""
        return sorted(int(d) for d in self.options.get("devices") or [])


def check_driver(host: AscendHost) -> None:
    """The driver's version.info exists and reads."""
    text, path = probed_file(host.probe, "driver")
    if text is None:
        drivers = ", ".join(host.stack.get("cann_compatible_drivers") or []) or "its drivers"
        host.error(
            f"Ascend driver not installed: {path} not found; {stack_label(host.stack)} runs "
            f"CANN {host.required_cann}, which supports the drivers {drivers} "
            "(cann_compatible_drivers): install such an Ascend HDK driver and its firmware "
            "(acceldeploy never installs the driver), then rerun"
        )
        return
    host.driver = host.parsed(AscendDriver.parse, text, path)
    if host.driver is None:
        return
    host.detected["driver"] = host.driver.version
    host.detected["driver_family"] = host.driver.family


def check_cann_toolkit(host: AscendHost) -> None:
    """The installed CANN toolkit, if any (ascend_toolkit_install.info); the host's own
    CANN is not read when the image carries it."""
    text, path = probed_file(host.probe, "toolkit")
    if text is None or host.in_image:
        return
    host.toolkit = host.parsed(CannToolkit.parse, text, path)
    if host.toolkit is None:
        return
    host.detected["cann"] = host.toolkit.version
    host.detected["cann_path"] = host.toolkit.path


def _wrong_cann_message(host: AscendHost) -> str:
    toolkit, required = host.toolkit, host.required_cann
    if toolkit is None:
        home = host.options.get("ascend_home") or "/usr/local/Ascend"
        found = f"CANN is not installed (no ascend_toolkit_install.info under {home})"
    else:
        found = f"CANN {toolkit.version} is installed ({toolkit.path})"
    older = toolkit is not None and version_key(toolkit.version) < version_key(required)
    alternative = (
        other_stacks_hint(host.stack, "compatible_cann", toolkit.version)
        or f", or pin a vllm-ascend release built for CANN {toolkit.version} in "
        f"{host.stack.get('file', 'versions/stacks.yml')}"
        if toolkit
        else ""
    )
    listed = ", ".join(str(c) for c in host.stack.get("compatible_cann") or [required])
    return (
        f"{found} but vllm-ascend v{host.stack['vllm_ascend']} needs CANN {required} "
        f"({stack_label(host.stack)}; compatible_cann: {listed})"
        f"{f' ({toolkit.version} is older)' if older and toolkit else ''}: install CANN "
        f"{required} (toolkit, "
        "kernels and nnal: set ascend_runtime_cann_toolkit_package, "
        "ascend_runtime_cann_kernels_package, ascend_runtime_cann_nnal_package and "
        f"ascend_runtime_cann_install: true){alternative}"
    )


def check_cann_version(host: AscendHost) -> None:
    """CANN is the pinned version; if not, plan its install (cann_install) or say how."""
    if host.cann_ok or host.in_image:
        return
    if host.options.get("cann_install"):
        host.install = _cann_install_plan(
            host.options,
            host.required_cann,
            str(host.probe.get("arch") or ""),
            str(host.stack["env_scripts"][0]),
            host.verdict,
        )
    else:
        host.error(_wrong_cann_message(host))


def check_driver_supports_cann(host: AscendHost) -> None:
    """Driver <-> CANN: the toolkit's own compatible_version names the driver releases it
    supports; before CANN is installed the stack carries the same list."""
    driver, toolkit = host.driver, host.toolkit
    if driver is None or not host.options.get("check_driver", True):
        return
    supported = set(host.stack.get("cann_compatible_drivers") or [])
    if toolkit is not None and host.cann_ok:
        supported |= set(toolkit.compatible)
    listed_by_driver = (
        toolkit is not None and innerversion_family(toolkit.innerversion) in driver.compatible
    )
    if driver.family and supported and driver.family not in supported and not listed_by_driver:
        lists = "cann_compatible_drivers" + (
            " and the installed CANN's compatible_version" if toolkit and host.cann_ok else ""
        )
        host.error(
            f"Ascend driver {driver.version} ({driver.family}) is not one CANN "
            f"{host.required_cann} supports ({', '.join(sorted(supported))}: {lists} of "
            f"{stack_label(host.stack)}): upgrade the Ascend HDK driver and firmware"
            f"{other_stacks_hint(host.stack, 'cann_compatible_drivers', driver.family)}"
        )


def _firmware_driver_errors(firmware: AscendFirmware, driver: AscendDriver) -> list[str]:
    errors: list[str] = []
    if driver.firmware_ranges and not firmware_in_driver_ranges(firmware.version, driver):
        spans = ", ".join(f"[{lo}, {hi}]" for lo, hi in driver.firmware_ranges)
        errors.append(
            f"Ascend firmware {firmware.version} is outside driver "
            f"{driver.version}'s compatible firmware range {spans}: install the "
            "firmware package released with this driver"
        )
    if firmware.driver_ranges and not driver_in_firmware_ranges(driver.package_version, firmware):
        errors.append(
            f"Ascend driver {driver.package_version} is not one firmware "
            f"{firmware.version} supports "
            f"({', '.join(lo for lo, _ in firmware.driver_ranges)}): "
            "install matching driver and firmware packages"
        )
    return errors


def check_firmware(host: AscendHost) -> None:
    """Firmware <-> driver: each within the other's compatibility ranges."""
    enabled = host.options.get("check_firmware", True)
    text, path = probed_file(host.probe, "firmware")
    if text is None:
        if enabled:
            host.error(
                f"Ascend firmware version file {path} not found: install the NPU firmware "
                "package matching the driver, or set ascend_runtime_check_firmware: false"
            )
        return
    try:
        firmware = AscendFirmware.parse(text)
    except AcceldeployError as exc:
        host.error(f"{path}: {exc}")
        return
    host.detected["firmware"] = firmware.version
    if host.driver is not None and enabled:
        host.verdict.errors.extend(_firmware_driver_errors(firmware, host.driver))


def _judge_chips(host: AscendHost, info: NpuSmi) -> None:
    """The services' devices exist and are healthy; unhealthy unused ones are a warning."""
    wanted = host.wanted
    by_device = {c.device: c for c in info.chips}
    for device in wanted:
        chip = by_device.get(device)
        if chip is None:
            host.error(
                f"a service uses NPU device {device} but npu-smi shows devices "
                f"{host.devices}: fix the services' devices"
            )
        elif chip.health != "OK":
            host.error(
                f"NPU {chip.npu} chip {chip.chip} (device {device}, {chip.bus_id}) "
                f"health is {chip.health}: repair or take it out of the services' devices"
            )
    for chip in info.chips:
        if chip.device not in wanted and chip.health != "OK":
            host.verdict.warnings.append(
                f"NPU {chip.npu} chip {chip.chip} health is {chip.health} (not used)"
            )


def check_npu_smi(host: AscendHost) -> None:
    """npu-smi info runs and shows the services' devices, healthy."""
    smi = probed_command(host.probe, "npu_smi")
    if not smi.get("found"):
        host.error(
            "npu-smi not found on PATH (or /usr/local/bin/npu-smi): install the Ascend driver "
            "(it ships npu-smi)"
        )
        return
    info = host.tool_output(smi, "npu-smi info", parse_npu_smi_info)
    if info is None:
        return
    host.devices = info.devices
    host.detected["npu_smi"] = info.version
    host.detected["npus"] = [asdict(c) for c in info.chips]
    _judge_chips(host, info)


def check_device_nodes(host: AscendHost) -> None:
    """The device nodes the unit will pass to vLLM are character devices."""
    nodes = [str(n) for n in host.options.get("device_nodes") or []]
    pattern = str(host.options.get("device_node_pattern") or "/dev/davinci{index}")
    nodes += [pattern.format(index=d) for d in (host.wanted or host.devices)]
    host.nodes = nodes
    host.verdict.errors.extend(
        device_node_errors(host.probe, nodes, "is the Ascend driver loaded?")
    )


def check_group(host: AscendHost) -> None:
    """The device group exists, so the service user can open the devices."""
    group = str(host.options.get("group") or "HwHiAiUser")
    if not (host.probe.get("groups") or {}).get(group):
        host.error(
            f"group {group} does not exist: the Ascend driver installer creates it (install the "
            "driver with --install-for-all), or set ascend_runtime_group"
        )


def check_env_scripts(host: AscendHost) -> None:
    """The launcher's environment scripts exist (with the pinned CANN; after an install the
    role checks them again)."""
    options = host.options
    if host.in_image:
        return  # the image sources its own
    host.env_scripts = [str(s) for s in options.get("env_scripts") or host.stack["env_scripts"]]
    paths = host.probe.get("paths") or {}
    present = {str(p) for p, e in paths.items() if e and e.get("exists")}
    if not host.cann_ok:
        return
    for script in host.env_scripts:
        if script not in present:
            host.error(
                f"{script} not found: CANN {host.required_cann} toolkit and NNAL (libatb) must "
                "both be installed; set ascend_runtime_env_scripts if they live elsewhere"
            )


# What the version files alone decide (no device, no npu-smi): preflight's first contact runs
# these too (acceldeploy.runtimes.stacklock), before any host changes.
ASCEND_VERSION_CHECKS: tuple[Callable[[AscendHost], None], ...] = (
    check_driver,
    check_cann_toolkit,
    check_cann_version,
    check_driver_supports_cann,
    check_firmware,
)


def check_docker(host: AscendHost) -> None:
    """Docker is installed, when the services run in the stack's image."""
    if host.in_image and not probed_command(host.probe, "docker_version").get("found"):
        host.error(
            "docker not found: python_env_manager container runs vllm-ascend's image under "
            "Docker; install Docker, or set python_env_manager to conda"
        )


def check_image(host: AscendHost) -> None:
    """The stack's image is on the host, or a tarball or registry it comes from is set."""
    if host.in_image:
        host.image = judge_image(host, ROLE, str(host.options.get("image") or ""))


ASCEND_CHECKS: tuple[Callable[[AscendHost], None], ...] = (
    *ASCEND_VERSION_CHECKS,
    check_npu_smi,
    check_device_nodes,
    check_group,
    check_env_scripts,
    check_docker,
    check_image,
)


def ascend_check(
    probe: dict[str, Any], stack_entry: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """Judges an Ascend host against the pinned stack. ``probe`` is what the role's probe
    module read (files, command output, device nodes, groups); ``options`` are the role's
    switches (devices the services use, checks on/off, CANN packages, install)."""
    host = AscendHost(probe=probe, stack=stack_entry, options=options)
    for check in ASCEND_CHECKS:
        check(host)
    return {
        **host.verdict.summary(),
        "required": {
            "cann": host.required_cann,
            "vllm_ascend": str(stack_entry["vllm_ascend"]),
            "vllm": str(stack_entry["vllm"]),
            "torch_npu": str(stack_entry["torch_npu"]),
        },
        "detected": host.detected,
        "devices": host.devices,
        "device_nodes": host.nodes,
        "env_scripts": host.env_scripts,
        "install": host.install,
        "image": host.image,
    }


def ascend_fact(check: dict[str, Any]) -> dict[str, Any]:
    """What ascend_runtime records for the launcher: stable values only (no live usage)."""
    detected = check.get("detected") or {}
    keep = ("npu", "name", "chip", "device", "bus_id", "health", "hbm_total_mb", "memory_total_mb")
    image = check.get("image") or {}
    in_image = {"image": image["ref"], "image_id": detected.get("image_id", "")} if image else {}
    return {
        "platform": "ascend",
        "required": check.get("required") or {},
        **{k: detected.get(k, "") for k in ("driver", "driver_family", "firmware", "cann",
                                             "cann_path", "npu_smi")},
        "npus": [{k: c.get(k) for k in keep} for c in detected.get("npus") or []],
        "devices": check.get("devices") or [],
        "device_nodes": check.get("device_nodes") or [],
        "env_scripts": check.get("env_scripts") or [],
        **in_image,
    }  # fmt: skip
