"""Gaudi: the role's options, seed 004's hccl_demo command, Docker's daemon.json and the
runtime check.

``gaudi_check`` judges a host: hl-smi works and its driver matches the image's Intel Gaudi
software, module ids and NUMA nodes known, the services' module ids exist, device nodes
present, Docker and the habana container runtime registered, the image present or loadable
(tarball) / pullable (internal registry). It is a sequence of named checks
(``GAUDI_CHECKS``) over one ``GaudiHost``; each adds its findings.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.stacks import listed, other_stacks_hint, stack_label
from acceldeploy.platforms.gaudi.smi import (
    HlSmi,
    parse_hl_smi,
    parse_hl_smi_modules,
    parse_hl_smi_topo,
)
from acceldeploy.platforms.image import image_options, judge_image
from acceldeploy.platforms.probe import (
    CheckRun,
    device_node_errors,
    probed_command,
    probed_file,
)
from acceldeploy.platforms.versions import leading_numbers, same_version

T = TypeVar("T")
ROLE = "gaudi_runtime"
# Seed 004's HCCL_COMM_ID: one node's check meets on its own loopback
HCCL_COMM_ID = "127.0.0.1:5555"


def _software(version: str) -> tuple[int, ...]:
    return leading_numbers(version, 3)


def image_software(image: str) -> str:
    """vault.habana.ai/gaudi-docker/1.22.0/ubuntu22.04/... -> 1.22.0 ('' when not in the name)."""
    match = re.search(r"gaudi-docker/(\d+\.\d+\.\d+)/", image)
    return match.group(1) if match else ""


# --------------------------------------------------------------------------------------------
# The role's options, hccl_demo, daemon.json


def _module_ids(inputs: dict[str, Any]) -> list[int]:
    devices = []
    for device in inputs.get("devices") or []:
        if not str(device).isdigit() or int(device) > 7:
            raise AcceldeployError(
                f"gaudi_runtime_devices: {device!r} is not a Gaudi module id (0-7)"
            )
        devices.append(int(device))
    return sorted(set(devices))


def gaudi_options(inputs: dict[str, Any], stack_entry: dict[str, Any]) -> dict[str, Any]:
    """The Gaudi role's inputs checked before any host is touched; fails naming the variable."""
    match = str(inputs.get("driver_match") or "minor")
    if match not in ("minor", "patch", "none"):
        raise AcceldeployError(
            f"gaudi_runtime_driver_match {match!r} is unknown; use minor, patch or none"
        )
    devices = _module_ids(inputs)
    image = image_options(ROLE, inputs, stack_entry)
    minimum = inputs.get("hccl_min_nw_gbps") or 0
    try:
        minimum = float(minimum)
    except (TypeError, ValueError):
        minimum = -1.0
    if minimum < 0:
        raise AcceldeployError(
            f"gaudi_runtime_hccl_min_nw_gbps must be a number >= 0 (GB/s; 0 records only), "
            f"got {inputs.get('hccl_min_nw_gbps')!r}"
        )
    comm_id = str(inputs.get("hccl_comm_id") or HCCL_COMM_ID)
    if not re.fullmatch(r"[A-Za-z0-9.-]+:\d{1,5}", comm_id):
        raise AcceldeployError(
            f"gaudi_runtime_hccl_comm_id is the first node's address:port (HCCL_COMM_ID), "
            f"got {comm_id!r}"
        )
    libfabric = str(inputs.get("hccl_libfabric_root") or "")
    if libfabric and not libfabric.startswith("/"):
        raise AcceldeployError(
            f"gaudi_runtime_hccl_libfabric_root must be an absolute path in the image, "
            f"got {libfabric!r}"
        )
    software = str(inputs.get("software") or stack_entry["software"])
    _check_software(software, stack_entry)
    return {
        **inputs,
        "hccl_comm_id": comm_id,
        "hccl_libfabric_root": libfabric,
        "driver_match": match,
        "devices": devices,
        **image,
        "software": software,
        "hccl_min_nw_gbps": minimum,
    }


def _check_software(software: str, stack_entry: dict[str, Any]) -> None:
    """gaudi_runtime_software against the Intel Gaudi releases the stack's vLLM supports."""
    allowed = stack_entry.get("compatible_software") or [stack_entry["software"]]
    if listed(software, allowed):
        return
    raise AcceldeployError(
        f"gaudi_runtime_software is {software} but stack {stack_entry['name']} (vLLM "
        f"{stack_entry['vllm']}) runs on Intel Gaudi software {', '.join(map(str, allowed))} "
        f"only: leave gaudi_runtime_software empty (the stack's {stack_entry['software']})"
        f"{other_stacks_hint(stack_entry, 'compatible_software', software)}"
    )


def gaudi_hccl_argv(stack_entry: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """Seed 004's HCCL check in the image: build hccl_demo (the operator's checkout, mounted)
    and run the 8-rank all_reduce; the output goes through parse_hccl_demo. Scale-out runs it
    on every node at once, each with its ``--node_id`` and the first node's HCCL_COMM_ID,
    through libfabric and hccl_ofi_wrapper when their root is given."""
    demo = str(options.get("hccl_demo_dir") or "/opt/hccl_demo")
    args = [str(a) for a in options.get("hccl_args") or []] or [
        "--nranks", "8", "--node_id", "0", "--size", "32m", "--test", "all_reduce",
        "--loop", "1000", "--ranks_per_node", "8",
    ]  # fmt: skip
    script = "make -j && exec python3 run_hccl_demo.py " + shlex.join(args)
    libfabric = str(options.get("hccl_libfabric_root") or "")
    if libfabric:
        root = shlex.quote(libfabric)
        script = (f"export LIBFABRIC_ROOT={root} LD_LIBRARY_PATH={root}/lib:$LD_LIBRARY_PATH; "
                  + script)  # fmt: skip
    comm_id = str(options.get("hccl_comm_id") or HCCL_COMM_ID)
    return [
        "docker", "run", "--rm", *[str(a) for a in stack_entry["docker_run_args"]],
        "-e", f"HCCL_COMM_ID={comm_id}", "-v", f"{demo}:/hccl_demo", "-w", "/hccl_demo",
        str(options.get("image") or stack_entry["image"]), "bash", "-c", script,
    ]  # fmt: skip


def recorded_topology(fact: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The modules gaudi_runtime recorded ([{module_id, numa, cpus}], its local fact) as the
    units' topology ([{device, numa, cpus}]: vllm_service_topology's default)."""
    modules = (fact or {}).get("modules") or []
    return [
        {"device": m["module_id"], "numa": m.get("numa"), "cpus": m.get("cpus")}
        for m in modules
        if m.get("module_id") is not None
    ]


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


# --------------------------------------------------------------------------------------------
# The runtime check


@dataclass
class GaudiHost(CheckRun):
    """One Gaudi check run: its inputs, the verdict so far and what the checks found."""

    info: HlSmi | None = None
    modules: dict[int, int] = field(default_factory=dict)
    topo: dict[int, dict[str, Any]] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    image: dict[str, Any] = field(default_factory=dict)

    @property
    def software(self) -> str:
        return str(self.options.get("software") or self.stack["software"])

    @property
    def image_ref(self) -> str:
        return str(self.options.get("image") or self.stack["image"])

    @property
    def driver_match(self) -> str:
        return str(self.options.get("driver_match") or "minor")


def check_hl_smi(host: GaudiHost) -> None:
    """hl-smi runs and reads: driver, firmware, devices."""
    smi = probed_command(host.probe, "hl_smi")
    if not smi.get("found"):
        host.error(
            f"hl-smi not found on PATH: {stack_label(host.stack)} runs Intel Gaudi software "
            f"{host.software}; install its driver and software (habanalabs-installer.sh; "
            "hl-smi is in habanalabs-firmware-tools; acceldeploy never installs the driver)"
        )
        return
    info = host.tool_output(smi, "hl-smi", parse_hl_smi)
    if info is None:
        return
    host.info = info
    host.detected.update(
        driver=info.driver_version,
        driver_build=info.driver,
        firmware=info.firmware,
        hl_smi=info.smi_version,
        devices=[asdict(d) for d in info.devices],
    )


def check_driver_matches_software(host: GaudiHost) -> None:
    """The habanalabs driver is the image's Intel Gaudi software release (minor or patch)."""
    info, software = host.info, host.software
    width = {"minor": 2, "patch": 3}.get(host.driver_match)
    if info is None or not width:
        return
    if _software(info.driver_version)[:width] != _software(software)[:width]:
        series = ".".join(str(x) for x in _software(software)[:width])
        listed_software = ", ".join(
            str(s) for s in host.stack.get("compatible_software") or [host.stack["software"]]
        )
        host.error(
            f"habanalabs driver {info.driver_version} (hl-smi: Driver Version "
            f"{info.driver}) does not match Intel Gaudi software {software} "
            f"({stack_label(host.stack)}; compatible_software: {listed_software}; image "
            f"{host.image_ref}; gaudi_runtime_driver_match: {host.driver_match}): install "
            f"the {series}.x driver and firmware (habanalabs-installer.sh of that release)"
            f"{_driver_hint(host, info.driver_version, width)}"
        )


def _driver_hint(host: GaudiHost, driver: str, width: int) -> str:
    """How else to fit the driver: another stack for its release, or an image built for it."""
    series = ".".join(str(x) for x in _software(driver)[:width])
    return other_stacks_hint(host.stack, "compatible_software", driver) or (
        f", or pin an image built for {series} in {host.stack.get('file', 'versions/stacks.yml')}"
    )


def _parsed(host: GaudiHost, name: str, parser: Callable[[str], T], label: str) -> T | None:
    """A probed command's output through its parser; None (and an error) if either failed."""
    result = probed_command(host.probe, name)
    if int(result.get("rc", 1)) != 0:
        host.error(f"{label} failed (rc {result.get('rc')})")
        return None
    try:
        return parser(str(result.get("stdout") or ""))
    except AcceldeployError as exc:
        host.error(str(exc))
        return None


def check_modules_and_numa(host: GaudiHost) -> None:
    """Module ids and NUMA nodes (seed 004: pick module ids of one NUMA node)."""
    if host.info is not None:
        modules = _parsed(
            host, "hl_smi_modules", parse_hl_smi_modules, "hl-smi -Q index,module_id -f csv"
        )
        topo = _parsed(host, "hl_smi_topo", parse_hl_smi_topo, "hl-smi topo -c -N")
        host.modules, host.topo = modules or {}, topo or {}
    host.detected["modules"] = [
        {
            "index": index,
            "module_id": module,
            "numa": (host.topo.get(module) or {}).get("numa"),
            "cpus": (host.topo.get(module) or {}).get("cpus"),
        }
        for index, module in sorted(host.modules.items())
    ]


def check_service_modules(host: GaudiHost) -> None:
    """The services' module ids exist on this host."""
    if host.info is None or not host.modules:
        return
    known = set(host.modules.values())
    for device in sorted(int(d) for d in host.options.get("devices") or []):
        if device not in known:
            host.error(
                f"a service uses module id {device} but this host has module ids "
                f"{sorted(known)} (hl-smi -Q index,module_id -f csv): fix the services' devices"
            )


def check_service_numa(host: GaudiHost) -> None:
    """A warning for each service whose module ids span NUMA nodes."""
    topo = host.topo
    for service in host.options.get("services") or []:
        numa = {int(topo[int(d)]["numa"]) for d in service.get("devices") or [] if int(d) in topo}
        if len(numa) > 1:
            host.verdict.warnings.append(
                f"service {service.get('name')}: module ids {service.get('devices')} span NUMA "
                f"nodes {sorted(numa)}; seed 004 advises module ids of one NUMA node "
                "(hl-smi topo -c -N)"
            )


def check_device_nodes(host: GaudiHost) -> None:
    """A character device for every device hl-smi lists."""
    if host.info is None:
        return
    pattern = str(host.options.get("device_node_pattern") or "/dev/accel/accel{index}")
    host.nodes = [pattern.format(index=d.index) for d in host.info.devices]
    host.verdict.errors.extend(device_node_errors(host.probe, host.nodes, "is habanalabs loaded?"))


def check_docker(host: GaudiHost) -> None:
    """Docker is installed."""
    if not probed_command(host.probe, "docker_version").get("found"):
        host.error(
            "docker not found: install Docker (Intel Gaudi software "
            f"{host.software} is validated with Docker 25.0.1) and the habana container runtime"
        )


def check_container_runtime(host: GaudiHost) -> None:
    """The habana container runtime is registered in daemon.json and exists."""
    daemon, daemon_path = probed_file(host.probe, "daemon_json")
    runtime_name = str(host.options.get("container_runtime") or "habana")
    try:
        runtimes = docker_runtimes(daemon or "")
    except AcceldeployError as exc:
        runtimes = {}
        host.error(str(exc))
    runtime_path = runtimes.get(runtime_name, "")
    host.detected["container_runtime"] = {runtime_name: runtime_path} if runtime_path else {}
    if not runtime_path:
        host.error(
            f"the {runtime_name} container runtime is not registered in {daemon_path}: install "
            "habanalabs-container-runtime and add runtimes.habana.path "
            "/usr/bin/habana-container-runtime there (Intel Gaudi docs, Docker Installation), "
            "then restart docker"
        )
        return
    runtime_file = (host.probe.get("paths") or {}).get(runtime_path) or {}
    if not runtime_file.get("exists"):
        host.error(
            f"{daemon_path} registers {runtime_name} at {runtime_path}, which does not "
            "exist: install habanalabs-container-runtime"
        )


def check_image(host: GaudiHost) -> None:
    """The image is on the host, or a tarball or registry it comes from is set."""
    host.image = judge_image(host, ROLE, host.image_ref)


def check_base_image(host: GaudiHost) -> None:
    """A warning when the image's base is another Intel Gaudi release than the stack's."""
    soft = image_software(str(host.stack.get("base_image") or host.image_ref))
    if soft and not same_version(soft, host.software):
        host.verdict.warnings.append(
            f"the image's base is Intel Gaudi software {soft}, the stack says {host.software}"
        )


# What hl-smi's version lines alone decide: preflight's first contact runs these too
# (acceldeploy.runtimes.stacklock), before any host changes.
GAUDI_VERSION_CHECKS: tuple[Callable[[GaudiHost], None], ...] = (
    check_hl_smi,
    check_driver_matches_software,
)
GAUDI_CHECKS: tuple[Callable[[GaudiHost], None], ...] = (
    *GAUDI_VERSION_CHECKS,
    check_modules_and_numa,
    check_service_modules,
    check_service_numa,
    check_device_nodes,
    check_docker,
    check_container_runtime,
    check_image,
    check_base_image,
)


def gaudi_check(
    probe: dict[str, Any], stack_entry: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """Judges a Gaudi host: hl-smi works and its driver matches the image's Intel Gaudi
    software, device nodes present, module ids and NUMA nodes known, the services' module ids
    exist, Docker and the habana container runtime are registered, the image is present or
    can be loaded (tarball) / pulled (internal registry)."""
    host = GaudiHost(probe=probe, stack=stack_entry, options=options)
    for check in GAUDI_CHECKS:
        check(host)
    return {
        **host.verdict.summary(),
        "required": {
            "software": host.software,
            "image": host.image_ref,
            "driver_match": host.driver_match,
        },
        "detected": host.detected,
        "device_nodes": host.nodes,
        "image": host.image,
    }


def gaudi_fact(check: dict[str, Any], hccl: dict[str, Any] | None = None) -> dict[str, Any]:
    """What gaudi_runtime records: driver, firmware, module ids with NUMA nodes, the image."""
    detected = check.get("detected") or {}
    keep = ("index", "name", "bus_id", "memory_total_mib")
    fact = {
        "platform": "gaudi",
        "required": check.get("required") or {},
        **{k: detected.get(k, "") for k in ("driver", "driver_build", "firmware", "hl_smi",
                                             "image_id", "container_runtime")},
        "devices": [{k: d.get(k) for k in keep} for d in detected.get("devices") or []],
        "modules": detected.get("modules") or [],
        "device_nodes": check.get("device_nodes") or [],
        "image": (check.get("image") or {}).get("ref", ""),
    }  # fmt: skip
    if hccl:
        fact["hccl"] = hccl
    return fact
