"""The vendors' device exporters roles/monitor deploys, from the operator's artefacts.

- Ascend: MindCluster's npu-exporter, from ``monitor_npu_exporter_package`` (the binary, or
  MindCluster's zip / tar.gz holding it), run by ``npu-exporter.service``;
- Gaudi: Intel's metric exporter, the image ``monitor_gaudi_exporter_image`` (loaded from
  ``monitor_gaudi_exporter_image_tarball`` when given), run by ``gaudi-metric-exporter.service``
  through docker.

Which exporter a platform's hosts run is its class's ``device_exporter`` (acceldeploy.platforms);
how each one is planned, run and recorded is its ``Exporter`` here (``EXPORTERS``, by job).
A package or tarball is a file on the controller or an http(s) URL (with its sha256). Each
exporter goes only on the serving hosts of its platform whose inventory gives its artefact;
deploying it means scraping it (``monitor_device_exporters`` still adds the targets of
exporters the operator runs by other means). Which exporter a host runs, its command line,
its address and its unit's sandbox are decided here; the role's templates print them. A
mistake is refused naming the variable, before any host changes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups, roledefaults
from acceldeploy.platforms import PLATFORMS, PlatformBehaviour, find
from acceldeploy.serving import cluster
from acceldeploy.serving.layout import UNIT_DIR

ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")
NPU_BINARY_NAME = "npu-exporter"
NPU_UNIT = "npu-exporter.service"
GAUDI_UNIT = "gaudi-metric-exporter.service"
GAUDI_CONTAINER = "acceldeploy-gaudi-exporter"
DOCKER = "/usr/bin/docker"
# The driver's libraries, as MindCluster's own image sets LD_LIBRARY_PATH for it.
NPU_LIBRARY_PATH = ("/usr/local/Ascend/driver/lib64/driver",
                    "/usr/local/Ascend/driver/lib64/common", "/usr/local/Ascend/add-ons",
                    "/usr/local/Ascend/driver/lib64", "/usr/local/dcmi")  # fmt: skip
# Its default -logFile's directory, under /var/log (the unit's LogsDirectory=).
NPU_LOG_DIR = "mindx-dl/npu-exporter"
# What npu-exporter itself accepts (its main.go): anything else and it exits.
NPU_PORTS = range(1025, 40001)
NPU_UPDATE_TIMES = range(1, 61)
NPU_FLAGS_DECIDED_HERE = ("-ip", "-port", "-updateTime", "-logFile")
SHA256 = re.compile(r"[0-9a-f]{64}")
IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*")
VIEW_KEYS = ("monitor_npu_exporter_package", "monitor_npu_exporter_checksum",
             "monitor_npu_exporter_update_time", "monitor_npu_exporter_args",
             "monitor_npu_exporter_bin", "monitor_gaudi_exporter_image",
             "monitor_gaudi_exporter_image_tarball",
             "monitor_gaudi_exporter_image_tarball_checksum", "monitor_download_dir")  # fmt: skip

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


@dataclass(frozen=True)
class Artefact:
    """An operator's file: on the controller (copied to the host) or at a URL (downloaded by
    the host, checked against its sha256)."""

    variable: str
    location: str
    checksum: str
    download_dir: str

    @property
    def remote(self) -> bool:
        return self.location.startswith(("http://", "https://"))

    @property
    def name(self) -> str:
        return posixpath.basename(self.location.split("?", 1)[0])

    @property
    def path(self) -> str:
        """Where it lands on the host."""
        return posixpath.join(self.download_dir, self.name)

    @property
    def archive(self) -> bool:
        return self.name.endswith(ARCHIVES)

    def to_dict(self) -> dict[str, Any]:
        return {"variable": self.variable, "location": self.location, "checksum": self.checksum,
                "remote": self.remote, "path": self.path, "archive": self.archive}  # fmt: skip


def _text(hostvars: Mapping[str, Any], variable: str) -> str:
    return str(roledefaults.value(hostvars, variable) or "").strip()


@dataclass(frozen=True)
class Exporter:
    """A vendor's device exporter: its Prometheus job (the name a platform's class gives in
    ``device_exporter``, its key in data/device-exporters.yml), the variable of its port, the
    variables of its artefact (the first one deploys it), its unit, the role's task file that
    deploys it (roles/monitor/tasks/), and how it is planned, which files it leaves on the host
    beside its unit file, and its unit's directives that depend on the host."""

    job: str
    port_variable: str
    variables: tuple[str, ...]
    unit: str
    tasks: str
    plan: Callable[[str, Mapping[str, Any]], dict[str, Any]]
    files: Callable[[Mapping[str, Any]], list[str]]
    directives: Callable[[Mapping[str, Any], Sequence[str], Sequence[str]], dict[str, Any]]


def of_behaviour(platform: PlatformBehaviour | None) -> Exporter | None:
    """The exporter a platform's hosts run (none: it has none, or no platform)."""
    job = platform.device_exporter if platform else None
    return EXPORTERS[job] if job else None


def of_platform(name: str) -> Exporter | None:
    """The exporter of the platform called ``name`` (none for none, or an unknown name)."""
    return of_behaviour(find(name))


def deployed(hostvars: Mapping[str, Any]) -> Exporter | None:
    """The exporter this host deploys: its platform's, on a serving host whose inventory gives
    its artefact; else none."""
    exporter = of_platform(str(hostvars.get("acceldeploy_platform") or ""))
    if exporter is None or not groups.serves(hostvars):
        return None
    return exporter if _text(hostvars, exporter.variables[0]) else None


def scraped(hostvars: Mapping[str, Any]) -> bool:
    """The monitors scrape this host's device exporter: deployed here, or run by the
    operator (monitor_device_exporters)."""
    return deployed(hostvars) is not None or bool(
        roledefaults.value(hostvars, "monitor_device_exporters")
    )


@cache
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _artefact(
    hostvars: Mapping[str, Any], variable: str, checksum_variable: str, what: str
) -> Artefact:
    """The file a variable names, checked on the controller: an absolute path to an existing
    file (matching its sha256 when one is given) or an http(s) URL with its sha256."""
    location = _text(hostvars, variable)
    checksum = _text(hostvars, checksum_variable).lower()
    artefact = Artefact(variable, location, checksum, _text(hostvars, "monitor_download_dir"))
    if checksum and not SHA256.fullmatch(checksum):
        raise AcceldeployError(
            f"{checksum_variable} must be the sha256 of {variable} (64 hex digits), got "
            f"{checksum!r}"
        )
    if artefact.remote:
        if not checksum:
            raise AcceldeployError(
                f"{variable} is a URL ({location}) but {checksum_variable} is empty: give the "
                f"sha256 of {what} (sha256sum prints it), so the host checks what it downloads"
            )
        return artefact
    if not location.startswith("/"):
        raise AcceldeployError(
            f"{variable} must be an absolute path on the controller or an http(s) URL of "
            f"{what}, got {location!r}"
        )
    local = Path(location)
    if not local.is_file():
        raise AcceldeployError(
            f"{variable}: {location} is not a file on the controller; put {what} there, or "
            "give an http(s) URL the hosts can download it from"
        )
    if checksum:
        stat = local.stat()
        if _sha256(location, stat.st_mtime_ns, stat.st_size) != checksum:
            raise AcceldeployError(
                f"{variable}: {location} does not match {checksum_variable} ({checksum}); "
                "give the file the checksum names, or its own sha256"
            )
    return artefact


def _misplaced(host: str, hostvars: Mapping[str, Any]) -> None:
    """An artefact given on a serving host of another platform, where its exporter cannot run."""
    platform = str(hostvars.get("acceldeploy_platform") or "")
    mine = of_platform(platform)
    for other in PLATFORMS:
        exporter = of_behaviour(other)
        if exporter is None or exporter is mine:
            continue
        for variable in exporter.variables:
            if _text(hostvars, variable):
                raise AcceldeployError(
                    f"{host}: {variable} is set but its acceldeploy_platform is "
                    f"{platform or 'not set'}; that exporter runs on {other.name} hosts only: "
                    f"set {variable} in the group_vars of the {other.name} hosts"
                )


def _address(host: str, hostvars: Mapping[str, Any]) -> str:
    """The host's private address: where the monitors reach it, as node exporter binds."""
    return cluster.node_ip(hostvars, host)


def _npu_argv(host: str, hostvars: Mapping[str, Any], binary: str, address: str) -> list[str]:
    port = int(roledefaults.value(hostvars, "monitor_npu_exporter_port"))
    if port not in NPU_PORTS:
        raise AcceldeployError(
            f"{host}: monitor_npu_exporter_port {port} is outside 1025-40000, the ports "
            "npu-exporter accepts; choose one there (8082 is its default)"
        )
    update = roledefaults.value(hostvars, "monitor_npu_exporter_update_time")
    if not str(update).isdigit() or int(update) not in NPU_UPDATE_TIMES:
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
    extra = roledefaults.value(hostvars, "monitor_npu_exporter_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise AcceldeployError(
            "monitor_npu_exporter_args must be a list of npu-exporter flags, such as "
            "['-containerMode=containerd']"
        )
    for arg in extra:
        flag = arg.split("=", 1)[0].lstrip("-")
        if f"-{flag}" in NPU_FLAGS_DECIDED_HERE:
            raise AcceldeployError(
                f"{host}: monitor_npu_exporter_args sets {arg!r}, which the role decides: use "
                "monitor_npu_exporter_port, monitor_npu_exporter_update_time, or "
                "acceldeploy_node_ip for the address"
            )
    log_file = posixpath.join("/var/log", NPU_LOG_DIR, "npu-exporter.log")
    return [binary, f"-ip={address}", f"-port={port}", f"-updateTime={int(update)}",
            f"-logFile={log_file}", *extra]  # fmt: skip


def _npu_plan(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    what = "MindCluster's npu-exporter (the binary, or its zip / tar.gz)"
    package = _artefact(
        hostvars, "monitor_npu_exporter_package", "monitor_npu_exporter_checksum", what
    )
    binary = _text(hostvars, "monitor_npu_exporter_bin")
    if not binary.startswith("/"):
        raise AcceldeployError(f"monitor_npu_exporter_bin must be an absolute path, got {binary!r}")
    address = _address(host, hostvars)
    unpacked = posixpath.join(
        package.download_dir, f"{package.name}.d", NPU_BINARY_NAME
    )  # one directory per package: a new one is unpacked anew
    extract = ["/usr/bin/python3", "-c", EXTRACT_MEMBER, package.path, NPU_BINARY_NAME, unpacked]
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
        "argv": _npu_argv(host, hostvars, binary, address),
    }


def _image(hostvars: Mapping[str, Any]) -> str:
    image = _text(hostvars, "monitor_gaudi_exporter_image")
    if not IMAGE.fullmatch(image):
        raise AcceldeployError(
            f"monitor_gaudi_exporter_image {image!r} is not an image reference; name it as "
            "docker does, e.g. vault.habana.ai/gaudi-metric-exporter/metric-exporter:1.23.0-695"
        )
    return image


def _gaudi_plan(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    image = _image(hostvars)
    tarball = None
    if _text(hostvars, "monitor_gaudi_exporter_image_tarball"):
        tarball = _artefact(
            hostvars, "monitor_gaudi_exporter_image_tarball",
            "monitor_gaudi_exporter_image_tarball_checksum",
            f"a `docker save` tarball of {image}",
        )  # fmt: skip
    address = _address(host, hostvars)
    port = int(roledefaults.value(hostvars, "monitor_gaudi_exporter_port"))
    bind = f"[{address}]" if ":" in address else address
    # Intel's documented run, but its port published on the private address alone: with
    # --network=host it would answer on every interface (it takes no address).
    argv = [DOCKER, "run", "--rm", "--name", GAUDI_CONTAINER, "--pull=never", "--privileged",
            "-v", "/dev:/dev", "-p", f"{bind}:{port}:{port}",
            image, "--port", str(port)]  # fmt: skip
    load = [DOCKER, "load", "--input", tarball.path] if tarball else [DOCKER, "pull", image]
    return {
        "exporter": GAUDI.job,
        "unit": GAUDI.unit,
        "tasks": GAUDI.tasks,
        "address": address,
        "image": image,
        "tarball": tarball.to_dict() if tarball else None,
        "load_argv": load,
        "container": GAUDI_CONTAINER,
        "argv": argv,
    }


def plan(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """What this host's device exporter is and how it runs ({'exporter': ''} for none); every
    input checked, naming the host and the variable."""
    try:
        return _plan(host, hostvars)
    except AcceldeployError as exc:
        message = str(exc)
        raise AcceldeployError(
            message if message.startswith(f"{host}: ") else f"{host}: {message}"
        ) from None


def _plan(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """Gateways and monitors inherit the fleet's variables and run no exporter."""
    if not groups.serves(hostvars):
        return {"exporter": ""}
    _misplaced(host, hostvars)
    if _text(hostvars, "monitor_gaudi_exporter_image_tarball") and not _text(
        hostvars, "monitor_gaudi_exporter_image"
    ):
        raise AcceldeployError(
            f"{host}: monitor_gaudi_exporter_image_tarball is set but "
            "monitor_gaudi_exporter_image is empty: name the image the tarball holds"
        )
    exporter = deployed(hostvars)
    return exporter.plan(host, hostvars) if exporter else {"exporter": ""}


def _davinci_index(path: str) -> int:
    return int(path.removeprefix("/dev/davinci"))


def npu_device_nodes(found: Sequence[str]) -> list[str]:
    """The nodes npu-exporter opens: the driver's shared ones (data/platforms.yml) and every
    chip's /dev/davinciN found on the host, in order."""
    shared = [str(p) for p in load("platforms")["ascend"]["device_nodes"]]
    chips = sorted({p for p in found if re.fullmatch(r"/dev/davinci\d+", p)}, key=_davinci_index)
    return [*shared, *chips]


def ip_allow(address: str, scrapers: Sequence[str]) -> list[str]:
    """Who may reach the exporter: this host and the monitors (as node exporter's drop-in)."""
    return ["localhost", *dict.fromkeys([address, *scrapers])]


def exec_line(argv: Sequence[str]) -> str:
    """An argv as a unit's Exec*= line: quoted, and % kept from systemd's specifiers."""
    return " ".join(shlex.quote(arg) for arg in argv).replace("%", "%%")


def _npu_directives(
    planned: Mapping[str, Any], scrapers: Sequence[str], device_nodes: Sequence[str]
) -> dict[str, Any]:
    return {
        "exec_start": exec_line(planned["argv"]),
        "environment": [f"LD_LIBRARY_PATH={':'.join(NPU_LIBRARY_PATH)}"],
        "logs_directory": NPU_LOG_DIR,
        "device_allow": npu_device_nodes(device_nodes),
        "ip_allow": ip_allow(planned["address"], scrapers),
    }


def _gaudi_directives(
    planned: Mapping[str, Any], scrapers: Sequence[str], device_nodes: Sequence[str]
) -> dict[str, Any]:
    return {
        "exec_start_pre": f"-{DOCKER} rm -f {planned['container']}",
        "exec_start": exec_line(planned["argv"]),
        "exec_stop": f"{DOCKER} stop {planned['container']}",
    }


NPU = Exporter(
    job="npu",
    port_variable="monitor_npu_exporter_port",
    variables=("monitor_npu_exporter_package",),
    unit=NPU_UNIT,
    tasks="npu_exporter.yml",
    plan=_npu_plan,
    files=lambda planned: [str(planned["binary"])],  # the binary it installed
    directives=_npu_directives,
)
GAUDI = Exporter(
    job="gaudi",
    port_variable="monitor_gaudi_exporter_port",
    variables=("monitor_gaudi_exporter_image", "monitor_gaudi_exporter_image_tarball"),
    unit=GAUDI_UNIT,
    tasks="gaudi_exporter.yml",
    plan=_gaudi_plan,
    files=lambda planned: [],  # the image is docker's
    directives=_gaudi_directives,
)
# By job, in the order the monitors' jobs list them (monitor/targets.py JOBS).
EXPORTERS = {exporter.job: exporter for exporter in (NPU, GAUDI)}


def _planned(planned: Mapping[str, Any]) -> Exporter | None:
    """The exporter a plan names (none for {'exporter': ''})."""
    return EXPORTERS.get(str(planned.get("exporter") or ""))


def owned(planned: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(files, units) the planned exporter leaves on the host: its files and its unit file,
    and its unit; nothing for none."""
    exporter = _planned(planned)
    if exporter is None:
        return [], []
    return [*exporter.files(planned), f"{UNIT_DIR}/{exporter.unit}"], [exporter.unit]


def unit(
    planned: Mapping[str, Any], scrapers: Sequence[str], device_nodes: Sequence[str] = ()
) -> dict[str, Any]:
    """The directives of the exporter's unit that depend on the host; the template names the
    rest."""
    exporter = _planned(planned)
    if exporter is None:
        raise AcceldeployError("no device exporter is planned on this host")
    return exporter.directives(planned, scrapers, device_nodes)


def metric_names(job: str) -> list[str]:
    """The metric names recorded from the vendor's documentation (data/device-exporters.yml)."""
    return list(load("device-exporters")[job]["metrics"])
