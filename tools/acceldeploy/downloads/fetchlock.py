"""The fetch venv's lock (versions/fetch.txt) for one host: its pins, and the wheels' download.

The lock covers CPython 3.9 to 3.13 with environment markers where pins differ per Python.
pip evaluates a requirements file's markers against the interpreter running it, even with
``--python-version``, so the controller filters the lock for the host's Python and architecture
first (``pins_for``) and downloads exactly those pins (``download_argv``), as in::

    python -m acceldeploy.downloads.fetchlock download \\
        --python 3.9 --arch x86_64 --glibc 31 --dest DIR

which writes DIR/requirements.txt (plain ``name==version`` lines) and one wheel per pin, into a
sibling temporary directory renamed to DIR once complete. The controller runs it (3.11+); the
syntax stays 3.9's so that a host's fetch venv (which has packaging) can import it too.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from acceldeploy.data_files import VERSIONS_DIR

LOCK = VERSIONS_DIR / "fetch.txt"
OLDEST_GLIBC_MINOR = 17  # manylinux2014 == manylinux_2_17
_PYTHON = re.compile(r"3\.(\d+)(\.\d+)?")
_ARCH = re.compile(r"[a-z0-9_]+")


def marker_environment(python: str, arch: str) -> dict[str, str]:
    """The marker variables of CPython ``python`` (``3.9`` or ``3.9.2``) on Linux ``arch``."""
    if not _PYTHON.fullmatch(python):
        raise ValueError(f"python {python!r}: expected 3.N or 3.N.M")
    if not _ARCH.fullmatch(arch):
        raise ValueError(f"arch {arch!r}: expected a machine name such as x86_64 or aarch64")
    full = python if python.count(".") == 2 else f"{python}.0"
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": arch,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(full.split(".")[:2]),
        "sys_platform": "linux",
    }


def lock_requirements(lock_text: str) -> list[Requirement]:
    """Every pin of the lock, markers kept; refuses anything but ``name==version [; marker]``."""
    requirements = []
    for number, raw in enumerate(lock_text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*", "", raw).strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise ValueError(f"lock line {number}: {raw.strip()!r}: {exc}") from None
        specs = list(req.specifier)
        if req.url or req.extras or len(specs) != 1 or specs[0].operator != "==":
            raise ValueError(f"lock line {number}: {raw.strip()!r} is not name==version")
        if "*" in specs[0].version:
            raise ValueError(f"lock line {number}: {raw.strip()!r} is not an exact version")
        requirements.append(req)
    return requirements


def _selected(requirements: Sequence[Requirement], env: dict[str, str]) -> list[str]:
    pins = []
    for req in requirements:
        if req.marker is None or req.marker.evaluate(dict(env, extra="")):
            pins.append(f"{req.name}=={next(iter(req.specifier)).version}")
    return pins


def pins_for(lock_text: str, python: str, arch: str) -> list[str]:
    """The lock's ``name==version`` pins (no markers) for CPython ``python`` on Linux ``arch``.

    ``python`` is ``3.N`` (what the host probe reports) or ``3.N.M``. For ``3.N`` the pins must
    not depend on the patch release (3.N.0 and a late 3.N.M must agree), or this refuses; one
    pin per package name, or this refuses.
    """
    requirements = lock_requirements(lock_text)
    pins = _selected(requirements, marker_environment(python, arch))
    if python.count(".") == 1:
        late = _selected(requirements, marker_environment(f"{python}.99", arch))
        if late != pins:
            raise ValueError(f"the lock's pins for {python} depend on its patch release")
    names = [canonicalize_name(pin.split("==")[0]) for pin in pins]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"the lock pins {', '.join(doubled)} more than once for {python} {arch}")
    return pins


def platform_args(arch: str, glibc_minor: int) -> list[str]:
    """pip's ``--platform`` options for a glibc 2.``glibc_minor`` host: every manylinux it runs."""
    if glibc_minor < OLDEST_GLIBC_MINOR:
        raise ValueError(f"glibc 2.{glibc_minor}: manylinux wheels need 2.{OLDEST_GLIBC_MINOR}+")
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(OLDEST_GLIBC_MINOR, glibc_minor + 1)]
    return [f"--platform={tag}" for tag in [*tags, f"manylinux2014_{arch}"]]


def download_argv(
    python_exe: str,
    dest: str | os.PathLike[str],
    requirements_file: str | os.PathLike[str],
    python: str,
    arch: str,
    glibc_minor: int,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``pip download`` of a marker-free requirements file's wheels for the host, as
    roles/model_weights/tasks/tooling.yml runs it (binary only, no dependencies)."""
    version = marker_environment(python, arch)["python_version"]
    return [
        python_exe,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--no-deps",
        "--implementation",
        "cp",
        "--python-version",
        version,
        "--dest",
        os.fspath(dest),
        "--requirement",
        os.fspath(requirements_file),
        *platform_args(arch, glibc_minor),
        *extra_args,
    ]


def command(
    python: str, wheel_set: Mapping[str, Any], lock: str, dest: str, pip_args: Sequence[str]
) -> list[str]:
    """The controller's command that downloads one wheel set (``download`` below) into dest."""
    argv = [str(python), "-m", "acceldeploy.downloads.fetchlock", "download"]
    argv += ["--python", str(wheel_set["python"]), "--arch", str(wheel_set["arch"])]
    argv += ["--glibc", str(wheel_set["glibc"]), "--lock", str(lock), "--dest", str(dest)]
    return argv + [f"--pip-arg={arg}" for arg in pip_args]


def _size_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 1e6


def put_in_place(tmp: Path, dest: Path) -> None:
    """Renames ``tmp`` to ``dest``; a previous ``dest`` goes (there is never a partial one)."""
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, old / dest.name)
    os.replace(tmp, dest)
    if old is not None:
        shutil.rmtree(old)


@contextmanager
def replacing(dest: Path) -> Iterator[Path]:
    """A temporary file beside ``dest`` to fill; filled, it becomes ``dest`` (mode 0644) in one
    rename, so ``dest`` is the old file or the new one, never part of either. Gone on failure."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def download(
    lock: Path,
    dest: Path,
    python: str,
    arch: str,
    glibc_minor: int,
    extra_args: Sequence[str],
    out: TextIO | None = None,
) -> int:
    """The CLI's ``download``: DIR/requirements.txt and its wheels, or nothing new at DIR. Its
    progress and pip's output go to ``out`` (default stdout; a caller whose stdout is its
    answer, as ``acceldeploy bundle build --json``, names stderr)."""
    start = time.monotonic()
    stream = out or sys.stdout

    def say(message: str) -> None:
        print(f"[{time.monotonic() - start:7.1f}s] {message}", file=stream, flush=True)

    pins = pins_for(lock.read_text(), python, arch)
    wanted = "".join(f"{pin}\n" for pin in pins)
    say(f"{lock}: {len(pins)} pins for CPython {python} {arch} glibc 2.{glibc_minor}")
    current = dest / "requirements.txt"
    if current.is_file() and current.read_text() == wanted:
        say(f"{dest}: already complete ({_size_mb(dest):.1f} MB)")
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        (tmp / "requirements.txt").write_text(wanted)
        argv = download_argv(
            sys.executable, tmp, tmp / "requirements.txt", python, arch, glibc_minor, extra_args
        )
        say("pip download --only-binary=:all: --no-deps ...")
        if subprocess.run(argv, stdout=out, check=False).returncode != 0:
            say(f"pip download failed; nothing changed at {dest}")
            return 1
        wheels = sorted(p.name for p in tmp.glob("*.whl"))
        if len(wheels) != len(pins):
            say(f"{len(wheels)} wheels for {len(pins)} pins; nothing changed at {dest}")
            return 1
        say(f"downloaded {len(wheels)} wheels, {_size_mb(tmp):.1f} MB")
        tmp.chmod(0o755)
        put_in_place(tmp, dest)
        say(f"{dest}: complete")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acceldeploy.downloads.fetchlock", description=__doc__
    )
    commands = parser.add_subparsers(dest="command", required=True)
    down = commands.add_parser("download", help="one host kind's wheels into --dest, atomically")
    down.add_argument("--python", required=True, help="the host's Python: 3.N (or 3.N.M)")
    down.add_argument("--arch", required=True, help="the host's machine: x86_64, aarch64")
    down.add_argument("--glibc", required=True, type=int, help="the host's glibc minor: 31")
    down.add_argument("--dest", required=True, type=Path, help="the directory to fill")
    down.add_argument("--lock", type=Path, default=LOCK, help=f"the lock (default {LOCK})")
    down.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        help="one more pip option, written --pip-arg=--retries=9 (repeatable)",
    )
    args = parser.parse_args(argv)
    # A TERMed run unwinds like an interrupted one: pip is killed, the partial directory goes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return download(args.lock, args.dest, args.python, args.arch, args.glibc, args.pip_arg)
    except (OSError, ValueError) as exc:
        print(f"fetchlock: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fetchlock: interrupted; nothing changed at {args.dest}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
