"""MindCluster's npu-exporter, from ``monitor_npu_exporter_package`` (the binary, or
MindCluster's zip / tar.gz holding it), run by ``npu-exporter.service``."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError
from acceldeploy.platforms.exporter import Exporter, ExporterInputs, exec_line, ip_allow

BINARY_NAME = "npu-exporter"
UNIT = "npu-exporter.service"
# The driver's libraries, as MindCluster's own image sets LD_LIBRARY_PATH for it.
LIBRARY_PATH = ("/usr/local/Ascend/driver/lib64/driver",
                "/usr/local/Ascend/driver/lib64/common", "/usr/local/Ascend/add-ons",
                "/usr/local/Ascend/driver/lib64", "/usr/local/dcmi")  # fmt: skip
# Its default -logFile's directory, under /var/log (the unit's LogsDirectory=).
LOG_DIR = "mindx-dl/npu-exporter"
# What npu-exporter itself accepts (its main.go): anything else and it exits.
PORTS = range(1025, 40001)
UPDATE_TIMES = range(1, 61)
FLAGS_DECIDED_HERE = ("-ip", "-port", "-updateTime", "-logFile")

EXTRACT_MEMBER = """\
import os, shutil, sys, tarfile, zipfile
archive, name, dest = sys.argv[1:]
def named(path):
    return path.rstrip("/").rsplit("/", 1)[-1] == name
if zipfile.is_zipfile(archive):
    box = zipfile.ZipFile(archive)
    found = [m for m in box.namelist() if named(m) and not m.endswith("/")]
    opener = box.open
else:
    box = tarfile.open(archive)
    found = [m for m in box.getmembers() if m.isfile() and named(m.name)]
    opener = box.extractfile
if len(found) != 1:
    sys.exit(f"{archive} holds {len(found)} files named {name}, not one")
with opener(found[0]) as source, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(source, out)
os.replace(dest + ".part", dest)
"""


def _argv(inputs: ExporterInputs, binary: str, address: str) -> list[str]:
    host = inputs.host
    port = int(inputs.value("monitor_npu_exporter_port"))
    if port not in PORTS:
        raise AcceldeployError(
            f"{host}: monitor_npu_exporter_port {port} is outside 1025-40000, the ports "
            "npu-exporter accepts; choose one there (8082 is its default)"
        )
    update = inputs.value("monitor_npu_exporter_update_time")
    if not str(update).isdigit() or int(update) not in UPDATE_TIMES:
        raise AcceldeployError(
            f"{host}: monitor_npu_exporter_update_time must be whole seconds from 1 to 60 "
            f"(npu-exporter's -updateTime), got {update!r}"
        )
    if ipaddress.ip_address(address).version != 4:
        raise AcceldeployError(
            f"{host}: npu-exporter listens on an IPv4 address only (it joins -ip and -port "
            f"without brackets), and this host's is {address}: set acceldeploy_node_ip to its "
            "private IPv4 address"
        )
    extra = inputs.value("monitor_npu_exporter_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise AcceldeployError(
            "monitor_npu_exporter_args must be a list of npu-exporter flags, such as "
            "['-containerMode=containerd']"
        )
    for arg in extra:
        flag = arg.split("=", 1)[0].lstrip("-")
        if f"-{flag}" in FLAGS_DECIDED_HERE:
            raise AcceldeployError(
                f"{host}: monitor_npu_exporter_args sets {arg!r}, which the role decides: use "
                "monitor_npu_exporter_port, monitor_npu_exporter_update_time, or "
                "acceldeploy_node_ip for the address"
            )
    log_file = posixpath.join("/var/log", LOG_DIR, "npu-exporter.log")
    return [binary, f"-ip={address}", f"-port={port}", f"-updateTime={int(update)}",
            f"-logFile={log_file}", *extra]  # fmt: skip


def _plan(inputs: ExporterInputs) -> dict[str, Any]:
    what = "MindCluster's npu-exporter (the binary, or its zip / tar.gz)"
    package = inputs.artefact("monitor_npu_exporter_package", "monitor_npu_exporter_checksum", what)
    binary = inputs.text("monitor_npu_exporter_bin")
    if not binary.startswith("/"):
        raise AcceldeployError(f"monitor_npu_exporter_bin must be an absolute path, got {binary!r}")
    address = inputs.address()
    unpacked = posixpath.join(
        package.download_dir, f"{package.name}.d", BINARY_NAME
    )  # one directory per package: a new one is unpacked anew
    extract = ["/usr/bin/python3", "-c", EXTRACT_MEMBER, package.path, BINARY_NAME, unpacked]
    return {
        "exporter": NPU.job,
        "unit": NPU.unit,
        "tasks": NPU.tasks,
        "address": address,
        "package": package.to_dict(),
        "binary": binary,
        "installed_from": unpacked if package.archive else package.path,
        "unpacked": unpacked if package.archive else "",
        "extract_argv": extract if package.archive else [],
        "argv": _argv(inputs, binary, address),
    }


def _davinci_index(path: str) -> int:
    return int(path.removeprefix("/dev/davinci"))


def device_nodes(found: Sequence[str]) -> list[str]:
    """The nodes npu-exporter opens: the driver's shared ones (data/platforms.yml) and every
    chip's /dev/davinciN found on the host, in order."""
    shared = [str(p) for p in load("platforms")["ascend"]["device_nodes"]]
    chips = sorted({p for p in found if re.fullmatch(r"/dev/davinci\d+", p)}, key=_davinci_index)
    return [*shared, *chips]


def _directives(
    planned: Mapping[str, Any], scrapers: Sequence[str], found_nodes: Sequence[str]
) -> dict[str, Any]:
    return {
        "exec_start": exec_line(planned["argv"]),
        "environment": [f"LD_LIBRARY_PATH={':'.join(LIBRARY_PATH)}"],
        "logs_directory": LOG_DIR,
        "device_allow": device_nodes(found_nodes),
        "ip_allow": ip_allow(planned["address"], scrapers),
    }


NPU = Exporter(
    job="npu",
    name="npu-exporter",
    port_variable="monitor_npu_exporter_port",
    variables=("monitor_npu_exporter_package",),
    settings=(
        "monitor_npu_exporter_checksum",
        "monitor_npu_exporter_update_time",
        "monitor_npu_exporter_args",
        "monitor_npu_exporter_bin",
    ),
    unit=UNIT,
    tasks="npu_exporter.yml",
    plan=_plan,
    files=lambda planned: [str(planned["binary"])],  # the binary it installed
    directives=_directives,
)
