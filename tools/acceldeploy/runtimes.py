"""Accelerator runtimes and the Python environment: parse what the hosts report, decide.

Everything the roles ascend_runtime, gaudi_runtime and python_env decide is here, typed and
unit-tested against recorded real tool output (tests/data/recorded); Ansible only collects
raw text on the hosts (the roles' probe modules) and calls these functions through
filter_plugins/runtime_filters.py. Templates and tasks only print what comes back.

- ``versions/stacks.yml``: the pinned stack of each platform (``load_stacks``, ``stack``).
- Ascend: driver / firmware ``version.info``, ``ascend_toolkit_install.info``, ``npu-smi info``
  parsers and ``ascend_gate`` (CANN == the pinned vllm-ascend's CANN, driver and firmware
  compatible, NPUs healthy, device nodes present, optional CANN ``.run`` install plan).
- Gaudi: ``hl-smi`` (default, ``-Q index,module_id -f csv``, ``topo -c -N``), hccl_demo output,
  the Docker daemon's runtimes and ``gaudi_gate`` (driver matches the image's Intel Gaudi
  software, habana runtime registered, module ids, NUMA nodes, image present or loadable).
- Python environment: ``python_env_plan`` (the exact commands for venv / conda / container,
  and the key that decides whether the environment is rebuilt) and ``python_env_verify``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from acceldeploy.errors import AcceldeployError

REPO = Path(__file__).resolve().parents[2]
VERSIONS_DIR = REPO / "versions"
STACKS_FILE = VERSIONS_DIR / "stacks.yml"
PLATFORMS = ("ascend", "gaudi", "cpu")
MANAGERS = ("conda", "venv", "container")
DEFAULT_MANAGER = {"ascend": "conda", "gaudi": "container", "cpu": "venv"}
# Bumped when the way an environment is built changes (not its pins): forces a rebuild.
PLAN_FORMAT = 1
RECORD_NAME = "acceldeploy-env.json"
VLLM_VERSION_CHECK = "import importlib.metadata as m, vllm; print(m.version('vllm'))"
REQUIREMENTS_NAME = "acceldeploy-requirements.txt"
CONSTRAINTS_NAME = "acceldeploy-constraints.txt"

# --------------------------------------------------------------------------------------------
# Stacks


def load_stacks(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """versions/stacks.yml (or another file of the same shape), checked for the keys used."""
    file = Path(path) if path else STACKS_FILE
    if not file.is_file():
        raise AcceldeployError(f"stacks file {file} does not exist")
    data = yaml.safe_load(file.read_text())
    if not isinstance(data, dict):
        raise AcceldeployError(f"{file}: expected a mapping of platform -> stack")
    required = {
        "ascend": (
            "python",
            "env_name",
            "vllm",
            "vllm_ref",
            "vllm_repo",
            "vllm_ascend",
            "vllm_ascend_ref",
            "vllm_ascend_repo",
            "torch",
            "torch_npu",
            "cann",
            "cann_compatible_drivers",
            "env_scripts",
        ),
        "gaudi": ("software", "image", "vllm_fork_ref", "docker_run_args"),
        "cpu": ("python", "vllm", "lock"),
    }
    for platform, keys in required.items():
        entry = data.get(platform)
        if not isinstance(entry, dict):
            raise AcceldeployError(f"{file}: no {platform} stack")
        missing = [k for k in keys if entry.get(k) in (None, "")]
        if missing:
            raise AcceldeployError(f"{file}: {platform} stack lacks {', '.join(missing)}")
    stacks: dict[str, dict[str, Any]] = {}
    for platform, entry in data.items():
        stacks[str(platform)] = {**entry, "name": str(platform), "file": str(file)}
    return stacks


def stack(platform: str, path: str | Path | None = None) -> dict[str, Any]:
    stacks = load_stacks(path)
    if platform not in stacks:
        raise AcceldeployError(
            f"acceldeploy_platform {platform!r} has no pinned stack in "
            f"{path or STACKS_FILE}; use one of {', '.join(sorted(stacks))}"
        )
    return stacks[platform]


def lock_requirements(entry: dict[str, Any]) -> list[str]:
    """The cpu stack's pins: every ``name==version`` line of its lock, then the extras."""
    lock = Path(entry["file"]).parent / str(entry["lock"])
    if not lock.is_file():
        raise AcceldeployError(f"the {entry['name']} stack's lock {lock} does not exist")
    pins: list[str] = []
    for raw in lock.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;]+", line):
            raise AcceldeployError(f"{lock}: not a name==version pin: {raw!r}")
        pins.append(line)
    return pins + [str(x) for x in entry.get("extra_requirements") or []]


# --------------------------------------------------------------------------------------------
# Versions


def normalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def version_key(text: str) -> tuple[tuple[float, int], ...]:
    """Orders Ascend-style versions: 8.3.RC1 < 8.3.RC2 < 8.3.0 < 8.5.0, 24.1.rc3 < 25.0.rc1.1,
    8.3.RC1.alpha002 < 8.3.RC1. Case-insensitive; unknown words sort before numbers."""
    parts: list[tuple[float, int]] = []
    for token in re.split(r"[.\-_]", text.strip().lower()):
        if not token:
            continue
        if token.isdigit():
            parts.append((2, int(token)))
            continue
        match = re.fullmatch(r"(rc|alpha|beta|b|t|spc)(\d*)", token)
        rank = {"alpha": -2, "beta": -1, "b": -1, "t": -1, "rc": 0, "spc": 3}.get(
            match.group(1) if match else "", -3
        )
        number = int(match.group(2)) if match and match.group(2) else 0
        parts.append((rank, number))
    return (*parts, (0.5, 0))


def same_version(a: str, b: str) -> bool:
    return version_key(a) == version_key(b)


def _numbers(text: str, width: int | None = None) -> tuple[int, ...]:
    found = tuple(int(x) for x in re.findall(r"\d+", text))
    return found[:width] if width else found


# --------------------------------------------------------------------------------------------
# Ascend: version files


CAT_N = re.compile(r"^\s*\d+(?:\t|\s{2,})(?=\S)")


def read_kv(text: str) -> dict[str, str]:
    """``key=value`` lines (``key : value`` too, as nnal/atb writes); comment lines skipped."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        # Tolerates `cat -n` line numbers, as version files are often posted.
        line = CAT_N.sub("", raw).strip()
        if not line or line.startswith("#"):
            continue
        if "=" in line:
            key, _, value = line.partition("=")
        elif ":" in line:
            key, _, value = line.partition(":")
        else:
            continue
        values.setdefault(key.strip(), value.strip())
    return values


def bracket_items(text: str) -> list[str]:
    """``[V100R001C13],[V100R001C15]`` -> the items; ``[7.0.0,7.5.99]`` -> one item."""
    return [item.strip() for item in re.findall(r"\[([^\]]*)\]", text or "")]


def ranges(text: str) -> list[tuple[str, str]]:
    """``[6.4.0,6.4.99],[7.0.0,7.7.99]`` -> [(6.4.0, 6.4.99), (7.0.0, 7.7.99)]."""
    found = []
    for item in bracket_items(text):
        low, _, high = item.partition(",")
        found.append((low.strip(), high.strip() or low.strip()))
    return found


def _families(text: str) -> tuple[str, ...]:
    return tuple(innerversion_family(x) for x in bracket_items(text))


def innerversion_family(innerversion: str) -> str:
    """V100R001C19SPC001B124 -> V100R001C19 (the release the compatibility lists name)."""
    match = re.match(r"(V\d+R\d+C\d+)", innerversion.strip(), re.IGNORECASE)
    return match.group(1).upper() if match else innerversion.strip()


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
            compatible=_families(kv.get("compatible_version", "")),
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
        version = kv.get("Version", "")
        if not version:
            raise AcceldeployError("firmware version.info has no Version= line")
        return cls(
            version=version,
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
        version = kv.get("version", "")
        if not version:
            raise AcceldeployError("ascend_toolkit_install.info has no version= line")
        return cls(
            version=version,
            innerversion=kv.get("innerversion", ""),
            compatible=_families(kv.get("compatible_version", "")),
            arch=kv.get("arch", ""),
            path=kv.get("path", ""),
        )


def firmware_in_driver_ranges(firmware: str, driver: AscendDriver) -> bool:
    """A firmware Version (7.5.0.1.129) against the driver's compatible_version_fw ranges,
    compared on the first three numbers."""
    value = _numbers(firmware, 3)
    return any(
        _numbers(low, 3) <= value <= _numbers(high, 3) for low, high in driver.firmware_ranges
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
# Ascend: npu-smi info


@dataclass(frozen=True)
class NpuChip:
    npu: int
    name: str
    health: str
    chip: int
    device: int
    bus_id: str
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None


@dataclass(frozen=True)
class NpuSmi:
    version: str
    chips: tuple[NpuChip, ...]

    @property
    def devices(self) -> list[int]:
        return sorted({c.device for c in self.chips})


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_npu_smi_info(text: str) -> NpuSmi:
    """``npu-smi info``: 910B layout (NPU/Name, Chip/Bus-Id, HBM column) and 310P layout
    (Chip Device column, no HBM). The logical device id is the Device column when present,
    else the NPU id (chip 0)."""
    match = re.search(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", text)
    if not match:
        raise AcceldeployError("not npu-smi info output: no 'npu-smi <version>' header")
    version = match.group(2)
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    chips: list[NpuChip] = []
    pending: list[str] | None = None
    for line in lines:
        if "Process id" in line or "Process name" in line:
            break
        cells = _cells(line)
        if len(cells) < 3:
            continue
        head = cells[0].split()
        if pending is None:
            if len(head) >= 2 and head[0].isdigit() and not head[1].isdigit():
                pending = cells
            continue
        first = pending
        pending = None
        if not head or not head[0].isdigit():
            continue
        npu_id, name = int(first[0].split()[0]), first[0].split()[1]
        chip = int(head[0])
        device = int(head[1]) if len(head) > 1 and head[1].isdigit() else npu_id
        pairs = [(int(a), int(b)) for a, b in re.findall(r"(\d+)\s*/\s*(\d+)", cells[2])]
        memory = pairs[0] if pairs else (None, None)
        hbm = pairs[1] if len(pairs) > 1 else (None, None)
        chips.append(
            NpuChip(
                npu=npu_id,
                name=name,
                health=first[1],
                chip=chip,
                device=device,
                bus_id=cells[1],
                memory_used_mb=memory[0],
                memory_total_mb=memory[1],
                hbm_used_mb=hbm[0],
                hbm_total_mb=hbm[1],
            )
        )
    if not chips:
        raise AcceldeployError("npu-smi info lists no NPU")
    return NpuSmi(version=version, chips=tuple(chips))


# --------------------------------------------------------------------------------------------
# Gaudi: hl-smi, hccl_demo, Docker runtimes


@dataclass(frozen=True)
class HlDevice:
    index: int
    name: str
    bus_id: str
    memory_used_mib: int | None
    memory_total_mib: int | None


@dataclass(frozen=True)
class HlSmi:
    smi_version: str
    driver: str
    devices: tuple[HlDevice, ...]

    @property
    def driver_version(self) -> str:
        """1.22.1-97ec1a4 -> 1.22.1"""
        return self.driver.split("-", 1)[0]

    @property
    def firmware(self) -> str:
        """hl-1.22.1-fw-61.4.2.1 -> 61.4.2.1"""
        match = re.search(r"fw-([\d.]+)", self.smi_version)
        return match.group(1) if match else ""


def parse_hl_smi(text: str) -> HlSmi:
    smi = re.search(r"HL-SMI Version:\s*(\S+)", text)
    driver = re.search(r"^\|\s*Driver Version:\s*(\S+)", text, re.MULTILINE)
    if not smi or not driver:
        raise AcceldeployError("not hl-smi output: no 'HL-SMI Version' / 'Driver Version' header")
    devices: list[HlDevice] = []
    lines = text.splitlines()
    row = re.compile(
        r"^\|\s+(\d+)\s+(HL-\S+)\s.*?\|\s*([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)"
    )
    for number, line in enumerate(lines):
        found = row.match(line)
        if not found:
            continue
        memory = None
        if number + 1 < len(lines):
            memory = re.search(r"(\d+)MiB\s*/\s*(\d+)MiB", lines[number + 1])
        devices.append(
            HlDevice(
                index=int(found.group(1)),
                name=found.group(2),
                bus_id=found.group(3).lower(),
                memory_used_mib=int(memory.group(1)) if memory else None,
                memory_total_mib=int(memory.group(2)) if memory else None,
            )
        )
    if not devices:
        raise AcceldeployError("hl-smi lists no Gaudi device")
    return HlSmi(smi_version=smi.group(1), driver=driver.group(1), devices=tuple(devices))


def parse_hl_smi_modules(text: str) -> dict[int, int]:
    """``hl-smi -Q index,module_id -f csv`` -> {index: module_id}."""
    found: dict[int, int] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.lower().startswith("index"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            found[int(parts[0])] = int(parts[1])
    if not found:
        raise AcceldeployError("hl-smi -Q index,module_id -f csv printed no index, module_id row")
    return found


def parse_hl_smi_topo(text: str) -> dict[int, dict[str, Any]]:
    """``hl-smi topo -c -N`` -> {module_id: {cpus, numa}}. The CPU affinity may hold
    ``0-39, 80-119`` (a comma and a space), so the first field is the module and the last
    the NUMA node."""
    found: dict[int, dict[str, Any]] = {}
    for raw in text.splitlines():
        fields = raw.split()
        if len(fields) < 3 or not fields[0].isdigit() or not fields[-1].isdigit():
            continue
        cpus = re.sub(r"\s*,\s*", ",", " ".join(fields[1:-1]))
        found[int(fields[0])] = {"cpus": cpus, "numa": int(fields[-1])}
    if not found:
        raise AcceldeployError("hl-smi topo -c -N printed no modID row")
    return found


def parse_hccl_demo(text: str) -> dict[str, Any]:
    """hccl_demo's ``[BENCHMARK]`` block: the collective, NW and algorithm bandwidth (GB/s)."""
    bench = re.findall(r"\[BENCHMARK\]\s+(hccl\w+\([^)]*\))", text)
    network = re.findall(r"NW Bandwidth\s*:\s*([\d.]+)\s*GB/s", text)
    algo = re.findall(r"Algo Bandwidth\s*:\s*([\d.]+)\s*GB/s", text)
    if not network or not algo:
        raise AcceldeployError("hccl_demo printed no '[BENCHMARK] NW Bandwidth : <n> GB/s' line")
    return {
        "benchmark": bench[-1] if bench else "",
        "nw_bandwidth_gbps": float(network[-1]),
        "algo_bandwidth_gbps": float(algo[-1]),
    }


def docker_runtimes(daemon_json: str) -> dict[str, str]:
    """``/etc/docker/daemon.json`` -> {runtime name: path}, plus ``default-runtime``."""
    if not daemon_json.strip():
        return {}
    try:
        data = json.loads(daemon_json)
    except ValueError as exc:
        raise AcceldeployError(f"/etc/docker/daemon.json is not JSON: {exc}") from None
    found = {
        str(name): str((spec or {}).get("path", ""))
        for name, spec in (data.get("runtimes") or {}).items()
    }
    if data.get("default-runtime"):
        found["default-runtime"] = str(data["default-runtime"])
    return found


# --------------------------------------------------------------------------------------------
# Gates


@dataclass
class Verdict:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _file(probe: dict[str, Any], name: str) -> tuple[str | None, str]:
    """(content or None when absent, path) of a probed file."""
    entry = (probe.get("files") or {}).get(name) or {}
    content = entry.get("content") if entry.get("exists") else None
    return (str(content) if content is not None else None), str(entry.get("path") or name)


def _command(probe: dict[str, Any], name: str) -> dict[str, Any]:
    return dict((probe.get("commands") or {}).get(name) or {})


def _tail(result: dict[str, Any]) -> str:
    return str(result.get("stderr") or result.get("stdout") or "")[-300:].strip()


def _char_device(probe: dict[str, Any], path: str) -> bool | None:
    entry = (probe.get("paths") or {}).get(path)
    if not entry or not entry.get("exists"):
        return None
    return bool(entry.get("chr"))


def service_devices(services: list[dict[str, Any]] | None) -> list[int]:
    devices: set[int] = set()
    for service in services or []:
        for device in service.get("devices") or []:
            devices.add(int(device))
    return sorted(devices)


CANN_PACKAGE = re.compile(
    r"Ascend-cann-(?P<kind>toolkit|kernels(?:-[A-Za-z0-9]+)?|nnal)_(?P<version>[^_]+)_linux"
    r"(?:[-.](?P<arch>x86_64|aarch64))?\.run$",
    re.IGNORECASE,
)
CANN_KINDS = ("toolkit", "kernels", "nnal")


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


def _cann_install_plan(
    options: dict[str, Any], required: str, arch: str, toolkit_env: str, verdict: Verdict
) -> list[dict[str, Any]]:
    packages = options.get("cann_packages") or {}
    download_dir = str(options.get("cann_download_dir") or "/var/cache/acceldeploy/ascend")
    install_path = str(options.get("ascend_home") or "/usr/local/Ascend")
    extra = [str(a) for a in options.get("cann_install_args") or []]
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
        if meta["kind"] != kind:
            verdict.errors.append(f"{variable} is a {meta['kind']} package: {meta['name']}")
        if not same_version(meta["version"], required):
            verdict.errors.append(
                f"{variable} is CANN {meta['version']} ({meta['name']}) but the pinned stack "
                f"needs CANN {required}"
            )
        if meta["arch"] and arch and meta["arch"] != arch:
            verdict.errors.append(f"{variable} is for {meta['arch']}, this host is {arch}")
        remote = src.startswith(("http://", "https://"))
        path = f"{download_dir.rstrip('/')}/{meta['name']}" if remote else src
        flags = ["--full"] if kind == "toolkit" else ["--install"]
        argv = ["bash", path, *flags, f"--install-path={install_path}", "--quiet", *extra]
        if kind == "nnal":
            # NNAL's installer needs the toolkit's environment (vllm-ascend installation.md).
            argv = ["bash", "-c", f'source {shlex.quote(toolkit_env)} && exec "$@"', "bash", *argv]
        plan.append({"kind": kind, "src": src, "path": path, "download": remote, "argv": argv})
    return plan


def ascend_options(inputs: dict[str, Any], stack_entry: dict[str, Any]) -> dict[str, Any]:
    """The role's inputs checked without touching a host (validate.yml): devices are ints,
    CANN install needs the three packages of the pinned CANN version; fails naming the
    variable. Returns the options ascend_gate takes."""
    devices = []
    for device in inputs.get("devices") or []:
        if not str(device).isdigit():
            raise AcceldeployError(f"ascend_runtime_devices: {device!r} is not a device number")
        devices.append(int(device))
    packages = {
        kind: str((inputs.get("cann_packages") or {}).get(kind) or "") for kind in CANN_KINDS
    }
    required = str(stack_entry["cann"])
    for kind, src in packages.items():
        variable = f"ascend_runtime_cann_{kind}_package"
        if inputs.get("cann_install") and not src:
            raise AcceldeployError(
                f"ascend_runtime_cann_install is true but {variable} is empty: give the CANN "
                f"{required} {kind} .run package (a path on the host or an internal URL)"
            )
        if not src:
            continue
        if not src.startswith(("/", "http://", "https://")):
            raise AcceldeployError(
                f"{variable} must be an absolute path or an http(s) URL: {src!r}"
            )
        meta = cann_package(src)
        if meta["kind"] != kind:
            raise AcceldeployError(f"{variable} is a {meta['kind']} package: {meta['name']}")
        if not same_version(meta["version"], required):
            raise AcceldeployError(
                f"{variable} is CANN {meta['version']} ({meta['name']}) but vllm-ascend "
                f"v{stack_entry['vllm_ascend']} needs CANN {required}"
            )
    for name in ("env_scripts", "device_nodes", "cann_install_args"):
        value = inputs.get(name) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AcceldeployError(f"ascend_runtime_{name} must be a list of strings")
    pattern = str(inputs.get("device_node_pattern") or "/dev/davinci{index}")
    if "{index}" not in pattern:
        raise AcceldeployError(
            f"ascend_runtime_device_node_pattern must contain {{index}}, got {pattern!r}"
        )
    return {**inputs, "devices": sorted(set(devices)), "cann_packages": packages}


def ascend_gate(
    probe: dict[str, Any], stack_entry: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """Judges an Ascend host against the pinned stack. ``probe`` is what the role's probe
    module read (files, command output, device nodes, groups); ``options`` are the role's
    switches (devices the services use, checks on/off, CANN packages, install)."""
    verdict = Verdict()
    required_cann = str(stack_entry["cann"])
    pinned = f"vllm-ascend v{stack_entry['vllm_ascend']}"
    arch = str(probe.get("arch") or "")
    detected: dict[str, Any] = {}

    # Driver
    driver: AscendDriver | None = None
    text, path = _file(probe, "driver")
    if text is None:
        verdict.errors.append(
            f"Ascend driver not installed: {path} not found; install the Ascend HDK driver and "
            f"firmware that CANN {required_cann} supports, then rerun"
        )
    else:
        try:
            driver = AscendDriver.parse(text)
            detected["driver"] = driver.version
            detected["driver_family"] = driver.family
        except AcceldeployError as exc:
            verdict.errors.append(f"{path}: {exc}")

    # CANN toolkit
    toolkit: CannToolkit | None = None
    text, path = _file(probe, "toolkit")
    if text is not None:
        try:
            toolkit = CannToolkit.parse(text)
            detected["cann"] = toolkit.version
            detected["cann_path"] = toolkit.path
        except AcceldeployError as exc:
            verdict.errors.append(f"{path}: {exc}")
    cann_ok = toolkit is not None and same_version(toolkit.version, required_cann)
    install: list[dict[str, Any]] = []
    if not cann_ok:
        found = (
            f"CANN {toolkit.version} is installed ({toolkit.path})"
            if toolkit
            else (
                "CANN is not installed (no ascend_toolkit_install.info under "
                f"{options.get('ascend_home') or '/usr/local/Ascend'})"
            )
        )
        if options.get("cann_install"):
            install = _cann_install_plan(
                options, required_cann, arch, str(stack_entry["env_scripts"][0]), verdict
            )
        else:
            older = toolkit is not None and version_key(toolkit.version) < version_key(
                required_cann
            )
            alternative = (
                f", or pin a vllm-ascend release built for CANN {toolkit.version} in "
                f"{stack_entry.get('file', 'versions/stacks.yml')}"
                if toolkit
                else ""
            )
            verdict.errors.append(
                f"{found} but {pinned} needs CANN {required_cann}"
                f"{f' ({toolkit.version} is older)' if older and toolkit else ''}: install CANN "
                f"{required_cann} (toolkit, "
                "kernels and nnal: set ascend_runtime_cann_toolkit_package, "
                "ascend_runtime_cann_kernels_package, ascend_runtime_cann_nnal_package and "
                f"ascend_runtime_cann_install: true){alternative}"
            )

    # Driver <-> CANN: the toolkit's own compatible_version names the driver releases it
    # supports; before CANN is installed the stack carries the same list.
    if driver is not None and options.get("check_driver", True):
        supported = set(stack_entry.get("cann_compatible_drivers") or [])
        if toolkit is not None and cann_ok:
            supported |= set(toolkit.compatible)
        if (
            driver.family
            and supported
            and driver.family not in supported
            and not (
                toolkit is not None
                and innerversion_family(toolkit.innerversion) in driver.compatible
            )
        ):
            verdict.errors.append(
                f"Ascend driver {driver.version} ({driver.family}) is not one CANN "
                f"{required_cann} supports ({', '.join(sorted(supported))}): upgrade the "
                "Ascend HDK driver and firmware"
            )

    # Firmware <-> driver
    text, path = _file(probe, "firmware")
    if text is None:
        if options.get("check_firmware", True):
            verdict.errors.append(
                f"Ascend firmware version file {path} not found: install the NPU firmware "
                "package matching the driver, or set ascend_runtime_check_firmware: false"
            )
    else:
        try:
            firmware = AscendFirmware.parse(text)
            detected["firmware"] = firmware.version
            if driver is not None and options.get("check_firmware", True):
                if driver.firmware_ranges and not firmware_in_driver_ranges(
                    firmware.version, driver
                ):
                    spans = ", ".join(f"[{lo}, {hi}]" for lo, hi in driver.firmware_ranges)
                    verdict.errors.append(
                        f"Ascend firmware {firmware.version} is outside driver "
                        f"{driver.version}'s compatible firmware range {spans}: install the "
                        "firmware package released with this driver"
                    )
                if firmware.driver_ranges and not driver_in_firmware_ranges(
                    driver.package_version, firmware
                ):
                    verdict.errors.append(
                        f"Ascend driver {driver.package_version} is not one firmware "
                        f"{firmware.version} supports "
                        f"({', '.join(lo for lo, _ in firmware.driver_ranges)}): "
                        "install matching driver and firmware packages"
                    )
        except AcceldeployError as exc:
            verdict.errors.append(f"{path}: {exc}")

    # npu-smi
    wanted = sorted(int(d) for d in options.get("devices") or [])
    smi = _command(probe, "npu_smi")
    devices: list[int] = []
    if not smi.get("found"):
        verdict.errors.append(
            "npu-smi not found on PATH (or /usr/local/bin/npu-smi): install the Ascend driver "
            "(it ships npu-smi)"
        )
    elif int(smi.get("rc", 1)) != 0:
        verdict.errors.append(f"npu-smi info failed (rc {smi.get('rc')}): {_tail(smi)}")
    else:
        try:
            info = parse_npu_smi_info(str(smi.get("stdout") or ""))
            devices = info.devices
            detected["npu_smi"] = info.version
            detected["npus"] = [asdict(c) for c in info.chips]
            by_device = {c.device: c for c in info.chips}
            for device in wanted:
                chip = by_device.get(device)
                if chip is None:
                    verdict.errors.append(
                        f"a service uses NPU device {device} but npu-smi shows devices "
                        f"{devices}: fix the services' devices"
                    )
                elif chip.health != "OK":
                    verdict.errors.append(
                        f"NPU {chip.npu} chip {chip.chip} (device {device}, {chip.bus_id}) "
                        f"health is {chip.health}: repair or take it out of the services' devices"
                    )
            for chip in info.chips:
                if chip.device not in wanted and chip.health != "OK":
                    verdict.warnings.append(
                        f"NPU {chip.npu} chip {chip.chip} health is {chip.health} (not used)"
                    )
        except AcceldeployError as exc:
            verdict.errors.append(f"npu-smi info: {exc}")

    # Device nodes the unit will pass to vLLM
    nodes = [str(n) for n in options.get("device_nodes") or []]
    pattern = str(options.get("device_node_pattern") or "/dev/davinci{index}")
    nodes += [pattern.format(index=d) for d in (wanted or devices)]
    for node in nodes:
        state = _char_device(probe, node)
        if state is None:
            verdict.errors.append(f"device node {node} is missing: is the Ascend driver loaded?")
        elif not state:
            verdict.errors.append(f"{node} is not a character device")

    # The service user must be able to open the devices
    group = str(options.get("group") or "HwHiAiUser")
    if not (probe.get("groups") or {}).get(group):
        verdict.errors.append(
            f"group {group} does not exist: the Ascend driver installer creates it (install the "
            "driver with --install-for-all), or set ascend_runtime_group"
        )

    # Environment scripts for the launcher (after install they are re-checked)
    env_scripts = [str(s) for s in options.get("env_scripts") or stack_entry["env_scripts"]]
    present = {str(p) for p, e in (probe.get("paths") or {}).items() if e and e.get("exists")}
    if cann_ok:
        for script in env_scripts:
            if script not in present:
                verdict.errors.append(
                    f"{script} not found: CANN {required_cann} toolkit and NNAL (libatb) must "
                    "both be installed; set ascend_runtime_env_scripts if they live elsewhere"
                )
    return {
        "ok": verdict.ok,
        "errors": verdict.errors,
        "warnings": verdict.warnings,
        "message": "; ".join(verdict.errors),
        "required": {
            "cann": required_cann,
            "vllm_ascend": str(stack_entry["vllm_ascend"]),
            "vllm": str(stack_entry["vllm"]),
            "torch_npu": str(stack_entry["torch_npu"]),
        },
        "detected": detected,
        "devices": devices,
        "device_nodes": nodes,
        "env_scripts": env_scripts,
        "install": install,
    }


def _software(version: str) -> tuple[int, ...]:
    return _numbers(version, 3)


def image_software(image: str) -> str:
    """vault.habana.ai/gaudi-docker/1.22.0/ubuntu22.04/... -> 1.22.0 ('' when not in the name)."""
    match = re.search(r"gaudi-docker/(\d+\.\d+\.\d+)/", image)
    return match.group(1) if match else ""


def gaudi_options(inputs: dict[str, Any], stack_entry: dict[str, Any]) -> dict[str, Any]:
    """The Gaudi role's inputs checked before any host is touched; fails naming the variable."""
    match = str(inputs.get("driver_match") or "minor")
    if match not in ("minor", "patch", "none"):
        raise AcceldeployError(
            f"gaudi_runtime_driver_match {match!r} is unknown; use minor, patch or none"
        )
    devices = []
    for device in inputs.get("devices") or []:
        if not str(device).isdigit() or int(device) > 7:
            raise AcceldeployError(
                f"gaudi_runtime_devices: {device!r} is not a Gaudi module id (0-7)"
            )
        devices.append(int(device))
    tarball = str(inputs.get("image_tarball") or "")
    if tarball and not tarball.startswith(("/", "http://", "https://")):
        raise AcceldeployError(
            f"gaudi_runtime_image_tarball must be an absolute path or an http(s) URL: {tarball!r}"
        )
    registry = str(inputs.get("image_registry") or "")
    if registry and ("://" in registry or registry.endswith("/")):
        raise AcceldeployError(
            f"gaudi_runtime_image_registry is a registry host[:port][/path] without scheme or "
            f"trailing slash, got {registry!r}"
        )
    image = str(inputs.get("image") or stack_entry["image"])
    if not re.fullmatch(r"[a-z0-9][a-z0-9._/:@-]*", image):
        raise AcceldeployError(f"gaudi_runtime_image {image!r} is not an image reference")
    minimum = inputs.get("hccl_min_nw_gbps") or 0
    try:
        minimum = float(minimum)
    except (TypeError, ValueError):
        raise AcceldeployError(
            f"gaudi_runtime_hccl_min_nw_gbps must be a number, got {minimum!r}"
        ) from None
    pull = f"{registry}/{image}" if registry else ""
    download_dir = str(inputs.get("download_dir") or "/var/cache/acceldeploy/gaudi")
    name = PurePosixPath(tarball.split("?", 1)[0]).name
    remote = tarball.startswith(("http://", "https://"))
    tarball_path = f"{download_dir.rstrip('/')}/{name}" if remote else tarball
    return {
        **inputs,
        "driver_match": match,
        "devices": sorted(set(devices)),
        "image": image,
        "software": str(inputs.get("software") or stack_entry["software"]),
        "pull_ref": pull,
        "tarball_path": tarball_path,
        "hccl_min_nw_gbps": minimum,
    }


def gaudi_hccl_argv(stack_entry: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """Seed 004's HCCL check in the image: build hccl_demo (the operator's checkout, mounted)
    and run the 8-rank all_reduce; the output goes through parse_hccl_demo."""
    demo = str(options.get("hccl_demo_dir") or "/opt/hccl_demo")
    args = [str(a) for a in options.get("hccl_args") or []] or [
        "--nranks", "8", "--node_id", "0", "--size", "32m", "--test", "all_reduce",
        "--loop", "1000", "--ranks_per_node", "8",
    ]  # fmt: skip
    script = "make -j && exec python3 run_hccl_demo.py " + shlex.join(args)
    return [
        "docker", "run", "--rm", *[str(a) for a in stack_entry["docker_run_args"]],
        "-e", "HCCL_COMM_ID=127.0.0.1:5555", "-v", f"{demo}:/hccl_demo", "-w", "/hccl_demo",
        str(options.get("image") or stack_entry["image"]), "bash", "-c", script,
    ]  # fmt: skip


def docker_daemon_with_runtime(
    text: str, name: str = "habana", path: str = "/usr/bin/habana-container-runtime"
) -> str:
    """/etc/docker/daemon.json with runtimes.<name> registered (Intel Gaudi docs, Docker
    Installation), everything else kept."""
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise AcceldeployError(f"/etc/docker/daemon.json is not JSON: {exc}") from None
    runtimes = dict(data.get("runtimes") or {})
    runtimes[name] = {**(runtimes.get(name) or {}), "path": path, "runtimeArgs": []}
    data["runtimes"] = runtimes
    return json.dumps(data, indent=4, sort_keys=True) + "\n"


def gaudi_gate(
    probe: dict[str, Any], stack_entry: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """Judges a Gaudi host: hl-smi works and its driver matches the image's Intel Gaudi
    software, device nodes present, module ids and NUMA nodes known, the services' module ids
    exist, Docker and the habana container runtime are registered, the image is present or
    can be loaded (tarball) / pulled (internal registry)."""
    verdict = Verdict()
    software = str(options.get("software") or stack_entry["software"])
    image = str(options.get("image") or stack_entry["image"])
    match = str(options.get("driver_match") or "minor")
    detected: dict[str, Any] = {}
    wanted = sorted(int(d) for d in options.get("devices") or [])

    smi = _command(probe, "hl_smi")
    info: HlSmi | None = None
    if not smi.get("found"):
        verdict.errors.append(
            "hl-smi not found on PATH: install the Intel Gaudi driver and software "
            f"{software} (habanalabs-installer.sh; hl-smi is in habanalabs-firmware-tools)"
        )
    elif int(smi.get("rc", 1)) != 0:
        verdict.errors.append(f"hl-smi failed (rc {smi.get('rc')}): {_tail(smi)}")
    else:
        try:
            info = parse_hl_smi(str(smi.get("stdout") or ""))
            detected.update(
                driver=info.driver_version,
                driver_build=info.driver,
                firmware=info.firmware,
                hl_smi=info.smi_version,
                devices=[asdict(d) for d in info.devices],
            )
            width = {"minor": 2, "patch": 3}.get(match)
            if width and _software(info.driver_version)[:width] != _software(software)[:width]:
                series = ".".join(str(x) for x in _software(software)[:width])
                verdict.errors.append(
                    f"habanalabs driver {info.driver_version} (hl-smi: Driver Version "
                    f"{info.driver}) does not match Intel Gaudi software {software} of the "
                    f"pinned image {image}: install the {series}.x driver and firmware "
                    "(habanalabs-installer.sh of that release), or pin an image built for "
                    f"{'.'.join(str(x) for x in _software(info.driver_version)[:width])} in "
                    f"{stack_entry.get('file', 'versions/stacks.yml')}"
                )
        except AcceldeployError as exc:
            verdict.errors.append(f"hl-smi: {exc}")

    # Module ids and NUMA nodes (seed 004: pick module ids of one NUMA node)
    modules: dict[int, int] = {}
    topo: dict[int, dict[str, Any]] = {}
    for name, parser, label in (
        ("hl_smi_modules", parse_hl_smi_modules, "hl-smi -Q index,module_id -f csv"),
        ("hl_smi_topo", parse_hl_smi_topo, "hl-smi topo -c -N"),
    ):
        result = _command(probe, name)
        if info is None:
            break
        if int(result.get("rc", 1)) != 0:
            verdict.errors.append(f"{label} failed (rc {result.get('rc')})")
            continue
        try:
            parsed = parser(str(result.get("stdout") or ""))
        except AcceldeployError as exc:
            verdict.errors.append(str(exc))
            continue
        if name == "hl_smi_modules":
            modules = parsed  # type: ignore[assignment]
        else:
            topo = parsed  # type: ignore[assignment]
    table = [
        {
            "index": index,
            "module_id": module,
            "numa": (topo.get(module) or {}).get("numa"),
            "cpus": (topo.get(module) or {}).get("cpus"),
        }
        for index, module in sorted(modules.items())
    ]
    detected["modules"] = table
    if info is not None and modules:
        known = set(modules.values())
        for device in wanted:
            if device not in known:
                verdict.errors.append(
                    f"a service uses module id {device} but this host has module ids "
                    f"{sorted(known)} (hl-smi -Q index,module_id -f csv): fix the services' devices"
                )
    for service in options.get("services") or []:
        numa = {int(topo[int(d)]["numa"]) for d in service.get("devices") or [] if int(d) in topo}
        if len(numa) > 1:
            verdict.warnings.append(
                f"service {service.get('name')}: module ids {service.get('devices')} span NUMA "
                f"nodes {sorted(numa)}; seed 004 advises module ids of one NUMA node "
                "(hl-smi topo -c -N)"
            )

    # Device nodes
    nodes: list[str] = []
    if info is not None:
        pattern = str(options.get("device_node_pattern") or "/dev/accel/accel{index}")
        nodes = [pattern.format(index=d.index) for d in info.devices]
        for node in nodes:
            state = _char_device(probe, node)
            if state is None:
                verdict.errors.append(f"device node {node} is missing: is habanalabs loaded?")
            elif not state:
                verdict.errors.append(f"{node} is not a character device")

    # Docker and the habana runtime
    docker = _command(probe, "docker_version")
    if not docker.get("found"):
        verdict.errors.append(
            "docker not found: install Docker (Intel Gaudi software "
            f"{software} is validated with Docker 25.0.1) and the habana container runtime"
        )
    daemon, daemon_path = _file(probe, "daemon_json")
    runtime_name = str(options.get("container_runtime") or "habana")
    try:
        runtimes = docker_runtimes(daemon or "")
    except AcceldeployError as exc:
        runtimes = {}
        verdict.errors.append(str(exc))
    runtime_path = runtimes.get(runtime_name, "")
    detected["container_runtime"] = {runtime_name: runtime_path} if runtime_path else {}
    if not runtime_path:
        verdict.errors.append(
            f"the {runtime_name} container runtime is not registered in {daemon_path}: install "
            "habanalabs-container-runtime and add runtimes.habana.path "
            "/usr/bin/habana-container-runtime there (Intel Gaudi docs, Docker Installation), "
            "then restart docker"
        )
    else:
        runtime_file = (probe.get("paths") or {}).get(runtime_path) or {}
        if not runtime_file.get("exists"):
            verdict.errors.append(
                f"{daemon_path} registers {runtime_name} at {runtime_path}, which does not "
                "exist: install habanalabs-container-runtime"
            )

    # The image: present, or where it comes from
    inspect = _command(probe, "image_inspect")
    present = bool(docker.get("found")) and int(inspect.get("rc", 1)) == 0
    detected["image_id"] = str(inspect.get("stdout") or "").strip() if present else ""
    tarball = str(options.get("image_tarball") or "")
    registry = str(options.get("image_registry") or "")
    source = "present"
    if not present:
        if tarball:
            source = "tarball"
        elif registry:
            source = "registry"
        else:
            source = "missing"
            verdict.errors.append(
                f"image {image} is not on this host: set gaudi_runtime_image_tarball (a "
                "`docker save` tarball on the host or an internal http(s) URL) or "
                "gaudi_runtime_image_registry (an internal registry holding it)"
            )
    commands: list[list[str]] = []
    if source == "tarball":
        path = str(options.get("tarball_path") or tarball)
        commands = [["docker", "load", "--input", path]]
    elif source == "registry":
        pull = str(options.get("pull_ref") or f"{registry}/{image}")
        commands = [["docker", "pull", pull], ["docker", "tag", pull, image]]
    soft = image_software(str(stack_entry.get("base_image") or image))
    if soft and not same_version(soft, software):
        verdict.warnings.append(
            f"the image's base is Intel Gaudi software {soft}, the stack says {software}"
        )
    return {
        "ok": verdict.ok,
        "errors": verdict.errors,
        "warnings": verdict.warnings,
        "message": "; ".join(verdict.errors),
        "required": {"software": software, "image": image, "driver_match": match},
        "detected": detected,
        "device_nodes": nodes,
        "image": {"ref": image, "present": present, "source": source, "commands": commands},
    }


def ascend_fact(gate: dict[str, Any]) -> dict[str, Any]:
    """What ascend_runtime records for the launcher: stable values only (no live usage)."""
    detected = gate.get("detected") or {}
    keep = ("npu", "name", "chip", "device", "bus_id", "health", "hbm_total_mb", "memory_total_mb")
    return {
        "platform": "ascend",
        "required": gate.get("required") or {},
        **{k: detected.get(k, "") for k in ("driver", "driver_family", "firmware", "cann",
                                             "cann_path", "npu_smi")},
        "npus": [{k: c.get(k) for k in keep} for c in detected.get("npus") or []],
        "devices": gate.get("devices") or [],
        "device_nodes": gate.get("device_nodes") or [],
        "env_scripts": gate.get("env_scripts") or [],
    }  # fmt: skip


def gaudi_fact(gate: dict[str, Any], hccl: dict[str, Any] | None = None) -> dict[str, Any]:
    """What gaudi_runtime records: driver, firmware, module ids with NUMA nodes, the image."""
    detected = gate.get("detected") or {}
    keep = ("index", "name", "bus_id", "memory_total_mib")
    fact = {
        "platform": "gaudi",
        "required": gate.get("required") or {},
        **{k: detected.get(k, "") for k in ("driver", "driver_build", "firmware", "hl_smi",
                                             "image_id", "container_runtime")},
        "devices": [{k: d.get(k) for k in keep} for d in detected.get("devices") or []],
        "modules": detected.get("modules") or [],
        "device_nodes": gate.get("device_nodes") or [],
        "image": (gate.get("image") or {}).get("ref", ""),
    }  # fmt: skip
    if hccl:
        fact["hccl"] = hccl
    return fact


# --------------------------------------------------------------------------------------------
# Python environment


def _pip_source_args(options: dict[str, Any]) -> list[str]:
    args: list[str] = []
    if options.get("no_index"):
        args.append("--no-index")
    for link in _as_list(options.get("find_links")):
        args += ["--find-links", link]
    if options.get("index_url") and not options.get("no_index"):
        args += ["--index-url", str(options["index_url"])]
    if not options.get("no_index"):
        for url in _as_list(options.get("extra_index_urls")):
            args += ["--extra-index-url", url]
    for host in _as_list(options.get("trusted_hosts")):
        args += ["--trusted-host", host]
    return args


def _as_list(value: Any) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _check_url_or_path(name: str, value: str) -> None:
    if value and not (value.startswith(("http://", "https://", "file://", "/"))):
        raise AcceldeployError(f"{name} must be an absolute path or an http(s) URL, got {value!r}")


PIP = ["-m", "pip"]
PIP_QUIET = ["--disable-pip-version-check", "--no-input", "--no-cache-dir", "--progress-bar", "off"]


def _sourced(scripts: list[str], argv: list[str], ld_extra: str = "") -> list[str]:
    """argv run after sourcing the Ascend environment scripts (bash -c '...; exec "$@"')."""
    lines = ["set -e"] + [f"source {shlex.quote(s)}" for s in scripts]
    if ld_extra:
        lines.append(f'export LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{ld_extra}"')
    lines.append('exec "$@"')
    return ["bash", "-c", "; ".join(lines), "bash", *argv]


def python_env_plan(options: dict[str, Any]) -> dict[str, Any]:
    """The environment a host gets: where it lives, the exact commands that build it, what it
    must contain afterwards, and the key (pins + way of building) that decides a rebuild.

    Sources (index, mirror, find-links) are not part of the key: moving the mirror does not
    rebuild anything."""
    platform = str(options.get("platform") or "")
    if platform not in PLATFORMS:
        raise AcceldeployError(
            f"acceldeploy_platform {platform!r} is unknown; set it to one of {', '.join(PLATFORMS)}"
        )
    manager = str(options.get("manager") or DEFAULT_MANAGER[platform])
    if manager not in MANAGERS:
        raise AcceldeployError(
            f"python_env_manager {manager!r} is unknown; use one of {', '.join(MANAGERS)}"
        )
    if (manager == "container") != (platform == "gaudi"):
        raise AcceldeployError(
            f"python_env_manager {manager} does not fit platform {platform}: Gaudi runs vLLM "
            "in the container image (container); ascend and cpu use conda or venv"
        )
    entry = stack(platform, options.get("stacks_file") or None)
    for name in ("find_links", "index_url"):
        for value in _as_list(options.get(name)):
            _check_url_or_path(f"python_env_{name}", value)
    for value in _as_list(options.get("extra_index_urls")):
        _check_url_or_path("python_env_extra_index_urls", value)
    if options.get("no_index") and not _as_list(options.get("find_links")):
        raise AcceldeployError(
            "python_env_no_index is true but python_env_find_links is empty: point it at the "
            "wheelhouse (a directory on the host or an http(s) URL the controller serves)"
        )
    extra = [str(x) for x in options.get("extra_packages") or []]
    for pin in extra:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\[\],-]*==\S+", pin):
            raise AcceldeployError(f"python_env_extra_packages: {pin!r} is not name==version")

    if manager == "container":
        return _container_plan(entry, options)

    python = str(entry["python"])
    if manager == "venv":
        env = str(options.get("venv_path") or "/opt/acceldeploy/venv")
        create = [str(options.get("venv_python") or f"/usr/bin/python{python}"), "-m", "venv", env]
    else:
        root = str(options.get("conda_root") or "/opt/miniforge3")
        env = str(
            options.get("conda_env_path") or f"{root}/envs/{entry.get('env_name') or 'acceldeploy'}"
        )
        channels = _as_list(options.get("conda_channels")) or ["conda-forge"]
        create = [
            f"{root}/bin/conda",
            "create",
            "--yes",
            "--quiet",
            "--prefix",
            env,
            "--override-channels",
            *(a for c in channels for a in ("-c", c)),
            f"python={python}",
            "pip",
        ]
    if not env.startswith("/") or env.rstrip("/") in ("", "/opt", "/usr", "/usr/local"):
        raise AcceldeployError(
            f"the environment path {env!r} must be a dedicated absolute directory"
        )
    py = f"{env}/bin/python"
    requirements_path = f"{env}/{REQUIREMENTS_NAME}"
    constraints_path = f"{env}/{CONSTRAINTS_NAME}"
    source = _pip_source_args(options)
    steps: list[dict[str, Any]] = [{"name": f"create the {manager}", "argv": create, "env": {}}]
    expect: dict[str, str] = {}
    env_scripts = [str(s) for s in options.get("env_scripts") or entry.get("env_scripts") or []]
    # What `vllm --version` prints (the CLI reads the "vllm" distribution's metadata), after
    # importing vllm: a misnamed or broken install fails here, not at the first `vllm serve`.
    # The CLI itself imports every subcommand (~10-30 s), too slow for every run.
    verify_argv = [py, "-c", VLLM_VERSION_CHECK]

    if platform == "cpu":
        requirements = lock_requirements(entry) + extra
        constraints: list[str] = []
        steps.append(
            {
                "name": "install the pinned set (--no-deps: the lock is complete)",
                "argv": [
                    py,
                    *PIP,
                    "install",
                    *PIP_QUIET,
                    "--no-deps",
                    *source,
                    "-r",
                    requirements_path,
                ],
                "env": {},
            }
        )
        for pin in requirements:
            name, _, version = pin.partition("==")
            expect[normalize_name(name)] = version
    else:
        install_from = str(options.get("install_from") or "source")
        if install_from not in ("source", "wheels"):
            raise AcceldeployError(
                f"python_env_install_from {install_from!r} is unknown; use source or wheels"
            )
        constraints = [f"torch=={entry['torch']}", f"torch-npu=={entry['torch_npu']}"]
        requirements = [
            f"vllm=={entry['vllm']}",
            f"vllm-ascend=={entry['vllm_ascend']}",
            *constraints,
            *extra,
        ]
        expect = {
            "torch": str(entry["torch"]),
            "torch-npu": str(entry["torch_npu"]),
            "vllm-ascend": str(entry["vllm_ascend"]),
            "vllm": str(entry["vllm"]),
        }
        for pin in extra:
            name, _, version = pin.partition("==")
            expect[normalize_name(name)] = version
        ld = "/usr/local/Ascend/ascend-toolkit/latest/$(uname -m)-linux/devlib"
        pip_install = [py, *PIP, "install", *PIP_QUIET, "-c", constraints_path, *source]
        uninstall = {
            "name": "remove triton (vllm-ascend's Dockerfile: it does not work on Ascend)",
            "argv": [py, *PIP, "uninstall", "--yes", "--disable-pip-version-check", "triton"],
            "env": {},
        }
        if install_from == "wheels":
            steps.append(
                {
                    "name": "install vllm, vllm-ascend, torch, torch-npu (pre-built wheels)",
                    "argv": _sourced(env_scripts, [*pip_install, "-r", requirements_path], ld),
                    "env": {},
                }
            )
            steps.append(uninstall)
        else:
            src = f"{env}/src"
            vllm_repo = str(options.get("vllm_repo") or entry["vllm_repo"])
            ascend_repo = str(options.get("vllm_ascend_repo") or entry["vllm_ascend_repo"])
            steps += [
                {
                    "name": f"clone vllm {entry['vllm_ref']}",
                    "argv": [
                        "git",
                        "clone",
                        "--quiet",
                        "--depth",
                        "1",
                        "--branch",
                        str(entry["vllm_ref"]),
                        vllm_repo,
                        f"{src}/vllm",
                    ],
                    "env": {},
                },
                {
                    "name": "install vllm without a device backend (VLLM_TARGET_DEVICE=empty)",
                    "argv": [*pip_install, "-v", "-e", f"{src}/vllm"],
                    "env": {"VLLM_TARGET_DEVICE": "empty"},
                },
                uninstall,
                {
                    "name": f"clone vllm-ascend {entry['vllm_ascend_ref']}",
                    "argv": [
                        "git",
                        "clone",
                        "--quiet",
                        "--depth",
                        "1",
                        "--branch",
                        str(entry["vllm_ascend_ref"]),
                        ascend_repo,
                        f"{src}/vllm-ascend",
                    ],
                    "env": {},
                },
                {
                    "name": "fetch vllm-ascend's submodules",
                    "argv": [
                        "git",
                        "-C",
                        f"{src}/vllm-ascend",
                        "submodule",
                        "update",
                        "--init",
                        "--recursive",
                        "--depth",
                        "1",
                    ],
                    "env": {},
                },
                {
                    "name": "build and install vllm-ascend with the CANN environment",
                    "argv": _sourced(
                        env_scripts, [*pip_install, "-v", "-e", f"{src}/vllm-ascend"], ld
                    ),
                    "env": {},
                },
            ]
            if extra:
                steps.append(
                    {
                        "name": "install the extra packages",
                        "argv": [*pip_install, *extra],
                        "env": {},
                    }
                )
        verify_argv = _sourced(env_scripts, verify_argv)

    identity = {
        "format": PLAN_FORMAT,
        "platform": platform,
        "manager": manager,
        "python": python,
        "env": env,
        "requirements": requirements,
        "constraints": constraints,
        "install_from": options.get("install_from") if platform == "ascend" else "lock",
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    flavour = (
        f"vllm-ascend {entry['vllm_ascend']}" if platform == "ascend" else f"lock {entry['lock']}"
    )
    # pip unpacks every wheel under TMPDIR before installing: /tmp is often a small tmpfs.
    tmp = str(options.get("tmp_dir") or "/var/tmp")
    steps = [{**s, "env": {"TMPDIR": tmp, **s["env"]}} for s in steps]
    steps = [{**s, "command": _command_line(s)} for s in steps]
    return {
        "platform": platform,
        "manager": manager,
        "stack": {k: v for k, v in entry.items() if k != "file"},
        "env": env,
        "python": py,
        "python_version": python,
        "key": key,
        "record_path": f"{env}/{RECORD_NAME}",
        "requirements_path": requirements_path,
        "requirements_text": "\n".join(requirements) + "\n",
        "constraints_path": constraints_path,
        "constraints_text": "\n".join(constraints) + "\n" if constraints else "",
        "steps": steps,
        "commands": [s["command"] for s in steps],
        "expect": expect,
        "vllm_version": str(entry["vllm"]),
        "verify_argv": verify_argv,
        "env_scripts": env_scripts if platform == "ascend" else [],
        "summary": f"{manager} {env} for {platform}: vLLM {entry['vllm']} ({flavour}), "
        f"key {key[:12]}",
        "record": {"key": key, **identity, "commands": [s["command"] for s in steps]},
        "fact": {
            "platform": platform,
            "manager": manager,
            "env": env,
            "python": py,
            "key": key,
            "vllm": str(entry["vllm"]),
            "env_scripts": env_scripts if platform == "ascend" else [],
        },
    }


CREDENTIALS = re.compile(r"(?<=://)[^/@\s:]+(?::[^/@\s]*)?@")


def redact(text: str) -> str:
    """user:password@ in URLs (internal mirrors) replaced by ***@ for what is shown or recorded."""
    return CREDENTIALS.sub("***@", text)


def _command_line(step: dict[str, Any]) -> str:
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted((step.get("env") or {}).items()))
    line = shlex.join(str(a) for a in step["argv"])
    return redact(f"{env} {line}" if env else line)


def _container_plan(entry: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    image = str(options.get("image") or entry["image"])
    run = ["docker", "run", "--rm", *[str(a) for a in entry["docker_run_args"]]]
    check = [
        "docker",
        "run",
        "--rm",
        "--entrypoint",
        "python3",
        image,
        "-c",
        "import importlib.metadata as m; print(m.version('vllm'))",
    ]
    key = hashlib.sha256(
        json.dumps({"format": PLAN_FORMAT, "image": image, "run": run}, sort_keys=True).encode()
    ).hexdigest()
    return {
        "platform": "gaudi",
        "manager": "container",
        "stack": {k: v for k, v in entry.items() if k != "file"},
        "env": "",
        "python": "",
        "key": key,
        "image": image,
        "run_argv": [*run, image],
        "run_command": shlex.join([*run, image]),
        "summary": f"container {image} for gaudi: HabanaAI vllm-fork {entry['vllm_fork_ref']}",
        "verify_argv": check,
        "verify_command": shlex.join(check),
        "steps": [],
        "commands": [],
        "expect": {},
        "vllm_version": "",
        "env_scripts": [],
        "fact": {
            "platform": "gaudi",
            "manager": "container",
            "image": image,
            "run_argv": [*run, image],
            "key": key,
        },
    }


def python_env_verify(
    plan: dict[str, Any], pip_list: str, vllm_version_output: str = ""
) -> dict[str, Any]:
    """Checks ``pip list --format=json`` against the plan's pins (and vLLM's reported version);
    raises naming every missing or different package."""
    try:
        installed = {
            normalize_name(str(d["name"])): str(d["version"]) for d in json.loads(pip_list or "[]")
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise AcceldeployError(f"cannot read pip list --format=json output: {exc}") from None
    problems = []
    for name, version in sorted(plan.get("expect", {}).items()):
        have = installed.get(name)
        # vllm built from source carries a local label (0.12.0+empty): PEP 440 '==' ignores it.
        if have is None:
            problems.append(f"{name} is not installed (want {version})")
        elif have != version and have.split("+", 1)[0] != version:
            problems.append(f"{name} is {have}, want {version}")
    reported = (
        vllm_version_output.strip().splitlines()[-1].strip() if vllm_version_output.strip() else ""
    )
    want = str(plan.get("vllm_version") or "")
    if vllm_version_output and want and reported.split("+", 1)[0] != want:
        problems.append(f"the installed vllm reports {reported!r}, want {want}")
    if problems:
        raise AcceldeployError(
            f"the environment {plan.get('env')} does not hold the pinned stack: "
            + "; ".join(problems)
            + " (rerun with -e python_env_force_rebuild=true to recreate it)"
        )
    return {"packages": len(installed), "vllm": reported, "ok": True, "installed": installed}


def last_line(output: str) -> str:
    lines = [ln.strip() for ln in (output or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def python_env_fact(plan: dict[str, Any], vllm_output: str = "") -> dict[str, Any]:
    """The local fact the launcher reads: the plan's fact plus the vLLM version reported."""
    return {**plan.get("fact", {}), "vllm_reported": last_line(vllm_output)}


def record_key(record_text: str) -> str:
    """The key stored in an environment's record ('' when absent or unreadable)."""
    try:
        return str(json.loads(record_text or "{}").get("key") or "")
    except ValueError:
        return ""
