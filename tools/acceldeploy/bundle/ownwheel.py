"""The controller's own wheel for a bundle: the acceldeploy that is running, as a wheel, and
the dependencies it was installed with. No repository is needed.

Installed from a wheel (or by ``pip install`` of a source tree, which installs the wheel it
builds), every file of the distribution is in site-packages and its RECORD lists them: they
are packed back into that wheel, without what the installer added (INSTALLER, REQUESTED,
direct_url.json, compiled caches, the console script that entry_points.txt makes again) and
with a RECORD of their own. Installed editable (``make venv``), site-packages only points at
the checkout (direct_url.json): pip builds the wheel from that checkout.
"""

from __future__ import annotations

import json
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import Distribution, PackagePath, distributions
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from packaging.requirements import Requirement

import acceldeploy
from acceldeploy.downloads import wheelfile, wheelhouse
from acceldeploy.errors import AcceldeployError

DIST = "acceldeploy"
# What an installer writes into .dist-info beside the wheel's own files (PEP 376, PEP 610).
INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"})
# A fixed date for every file: the same installed files make the same wheel.
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def running_package() -> Path:
    return Path(acceldeploy.__file__).resolve().parent


def installed() -> Distribution:
    """The distribution the running package belongs to (a checkout's own egg-info, seen
    when tools/ is on sys.path, is not one)."""
    package = running_package()
    for dist in distributions(name=DIST):
        if editable_source(dist) is not None or _lists(dist, package / "__init__.py"):
            return dist
    raise AcceldeployError(
        f"acceldeploy runs from {package}, which no installed distribution holds: install it "
        "(`pip install` its wheel, or `make venv` in a checkout)"
    )


def requirements() -> list[str]:
    """The installed distribution's dependencies for this Python (not those of its extras)."""
    found = []
    for text in installed().requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.append(text)
    return found


def editable_source(dist: Distribution) -> Path | None:
    """The checkout an editable install points at, when the running package is in it."""
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    url = urlparse(str(direct_url.get("url", "")))
    if not direct_url.get("dir_info", {}).get("editable") or url.scheme != "file":
        return None
    source = Path(url2pathname(url.path)).resolve()
    return source if running_package().is_relative_to(source) else None


def _lists(dist: Distribution, file: Path) -> bool:
    return any(Path(str(dist.locate_file(path))).resolve() == file for path in dist.files or ())


def build(dest: Path, log: Path) -> Path:
    """The running acceldeploy's wheel, written into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    dist = installed()
    source = editable_source(dist)
    if source is None:
        return pack(dist, dest)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dest), str(source)]
    wheelhouse.run_logged(argv, log, wheelhouse.pip_env(isolated=False))
    name = f"{wheelhouse.wheel_dist(DIST)}-{dist.version}-"
    (wheel,) = (p for p in dest.glob("*.whl") if p.name.startswith(name))
    return wheel


def _info_dir(dist: Distribution) -> str:
    """The .dist-info directory the distribution's RECORD names."""
    for path in dist.files or ():
        if path.name == "RECORD" and len(path.parts) == 2 and path.parts[0].endswith(".dist-info"):
            return path.parts[0]
    raise AcceldeployError(f"{DIST} {dist.version}: no RECORD lists its files; reinstall it")


def _packed(path: PackagePath, info: str) -> bool:
    """A file of the wheel, not of the installer: console scripts live outside site-packages
    (``../``), the caches are compiled on install."""
    parts = path.parts
    return not (
        parts[0] == ".."
        or "__pycache__" in parts
        or path.suffix == ".pyc"
        or (parts[:-1] == (info,) and path.name in INSTALLER_FILES)
    )


def _tag(dist: Distribution, info: str) -> str:
    """The wheel's compatibility tag from its WHEEL file (one ``Tag:`` line or several)."""
    wheel = Parser().parsestr(dist.read_text("WHEEL") or "")
    tags = [tag.split("-") for tag in wheel.get_all("Tag") or ()]
    if not tags:
        raise AcceldeployError(f"{info}/WHEEL names no tag; reinstall acceldeploy")
    return "-".join(".".join(dict.fromkeys(part)) for part in zip(*tags, strict=True))


def _entry(name: str, mode: int) -> zipfile.ZipInfo:
    entry = zipfile.ZipInfo(name, date_time=FIXED_DATE)
    entry.external_attr = (mode & 0o777) << 16
    entry.compress_type = zipfile.ZIP_DEFLATED
    return entry


def pack(dist: Distribution, dest: Path) -> Path:
    """The wheel an installed (not editable) distribution came from, from its RECORD."""
    info = _info_dir(dist)
    tag = _tag(dist, info)
    wanted = [path for path in dist.files or () if _packed(path, info)]
    entries, record = [], []
    for path in sorted(wanted, key=lambda p: (p.parts[0] == info, p.as_posix())):
        local = Path(str(dist.locate_file(path)))
        if not local.is_file():
            raise AcceldeployError(f"{local} is gone from the installed acceldeploy; reinstall it")
        data = local.read_bytes()
        entries.append((_entry(path.as_posix(), local.stat().st_mode), data))
        record.append(f"{path.as_posix()},{wheelfile.record_hash(data)},{len(data)}")
    record.append(f"{info}/RECORD,,")
    entries.append((_entry(f"{info}/RECORD", 0o644), ("\n".join(record) + "\n").encode()))
    return wheelfile.write(dest / f"{info.removesuffix('.dist-info')}-{tag}.whl", entries)
