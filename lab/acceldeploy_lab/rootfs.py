"""The lab's Debian root filesystems, one per suite: each built once with debootstrap, cached
in $ACCELDEPLOY_CACHE/rootfs/<suite>, shared read-only by the hosts booted from it."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from acceldeploy.downloads import osrepo
from acceldeploy_lab import progress

DEFAULT_CACHE = Path("/var/cache/acceldeploy")
RECIPE_VERSION = 2
STAMP = Path("etc/acceldeploy-lab-rootfs.json")

COMMON_PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "python3-dev",
    "python3-apt",
    "sudo",
    "iproute2",
    "procps",
    "curl",
    "ca-certificates",
    "rsync",
    "git",
    "g++",
    "libnuma1",
    "libgomp1",
    "util-linux",
    "kmod",
    "grub-common",
    "grub2-common",
    "dmidecode",
)

# Unattended apt runs would race the roles' own apt tasks for the dpkg lock.
MASKED_UNITS: tuple[str, ...] = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
)

SSHD_CONFIG = """\
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
"""

HOSTS_FILE = """\
127.0.0.1\tlocalhost
::1\t\tlocalhost ip6-localhost ip6-loopback
ff02::1\t\tip6-allnodes
ff02::2\t\tip6-allrouters
"""


class RootfsError(Exception):
    pass


@dataclass(frozen=True)
class Suite:
    """A Debian release the lab boots and what debootstrap installs for it."""

    name: str
    release: str
    packages: tuple[str, ...]
    # The release's python3 (what python3-venv gives): the lab's hosts build their venv with it.
    python: str


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite("bookworm", "Debian 12", (*COMMON_PACKAGES, "cpufrequtils"), "3.11"),
        Suite("bullseye", "Debian 11", (*COMMON_PACKAGES, "cpufrequtils"), "3.9"),
        # cpufrequtils left Debian after bookworm; linux-cpupower is its successor.
        Suite("trixie", "Debian 13", (*COMMON_PACKAGES, "linux-cpupower"), "3.13"),
    )
}
DEFAULT_SUITE = SUITES["bookworm"]


def suite_named(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise RootfsError(
            f"unknown Debian suite {name!r}: the lab knows {', '.join(SUITES)}"
        ) from None


def cache_dir() -> Path:
    return Path(os.environ.get("ACCELDEPLOY_CACHE") or DEFAULT_CACHE)


def rootfs_path(cache: Path, suite: Suite) -> Path:
    return cache / "rootfs" / suite.name


def sources_list(suite: Suite, mirror_url: str) -> str:
    return osrepo.sources_list(suite.name, mirror_url)


def recipe_digest(suite: Suite) -> str:
    recipe = {
        "version": RECIPE_VERSION,
        "suite": suite.name,
        "packages": sorted(suite.packages),
        "masked": sorted(MASKED_UNITS),
        "sshd": SSHD_CONFIG,
        "hosts": HOSTS_FILE,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def built_digest(root: Path) -> str | None:
    try:
        stamp = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    digest = stamp.get("digest") if isinstance(stamp, dict) else None
    return digest if isinstance(digest, str) else None


def is_current(root: Path, suite: Suite) -> bool:
    return built_digest(root) == recipe_digest(suite)


def _unescape_mountinfo(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_points() -> list[Path]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(Path(_unescape_mountinfo(fields[4])))
    return points


def is_mounted(path: Path) -> bool:
    return path in mount_points()


def mounts_under(path: Path) -> list[Path]:
    base = path.resolve() if path.exists() else path
    return [p for p in mount_points() if p == base or base in p.parents]


def unmount_under(path: Path) -> None:
    for point in sorted(set(mounts_under(path)), key=lambda p: len(p.parts), reverse=True):
        if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(point)], capture_output=True, check=True)
    left = mounts_under(path)
    if left:
        raise RootfsError(f"still mounted under {path}: {', '.join(map(str, left))}")


def remove_tree(path: Path) -> None:
    """rmtree that refuses to descend into anything still mounted (a stray /dev bind, say)."""
    if not path.exists():
        return
    unmount_under(path)
    shutil.rmtree(path)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write(root: Path, rel: str, content: str, mode: int = 0o644) -> None:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    target.chmod(mode)


def configure(root: Path, suite: Suite, mirror_url: str) -> None:
    _write(root, "etc/machine-id", "", 0o444)
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    _write(root, "etc/ssh/sshd_config.d/10-acceldeploy-lab.conf", SSHD_CONFIG)
    _write(root, "etc/hostname", "acceldeploy-lab\n")
    _write(root, "etc/hosts", HOSTS_FILE)
    _write(root, "etc/default/locale", "LANG=C.UTF-8\n")
    _write(root, "etc/apt/sources.list", sources_list(suite, mirror_url))
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    stamp = {"digest": recipe_digest(suite), "suite": suite.name, "packages": list(suite.packages)}
    _write(root, str(STAMP), json.dumps(stamp, indent=2) + "\n")


def _wait(proc: subprocess.Popen[bytes], stop: threading.Event | None) -> int:
    """The process's exit code; RootfsError once `stop` is set (whoever wanted the tree gave up:
    a build in a worker thread sees no signal)."""
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                raise RootfsError(
                    "debootstrap stopped: the prepare it was part of failed"
                ) from None


def _debootstrap(
    suite: Suite,
    target: Path,
    debs: Path,
    mirror_url: str,
    log: Path,
    stop: threading.Event | None = None,
) -> None:
    argv = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(suite.packages)}",
        f"--cache-dir={debs}",
        suite.name,
        str(target),
        mirror_url,
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = _wait(proc, stop)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RootfsError(f"debootstrap failed (exit {code}); full log: {log}\n{tail}")


def ensure_rootfs(
    cache: Path,
    suite: Suite,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> Path:
    """Return the suite's cached rootfs, building it first if it is missing or its recipe changed.

    The build happens in a sibling temp dir that is renamed into place only when complete,
    so an interrupted build is never mistaken for a usable rootfs. Each suite has its own
    lock, download cache and log, so different suites can build at the same time.
    """
    target = rootfs_path(cache, suite)
    if is_current(target, suite):
        return target
    base = target.parent
    base.mkdir(parents=True, exist_ok=True)
    with file_lock(base / f".lock-{suite.name}"):
        if is_current(target, suite):
            return target
        for stale in (*base.glob(f".{suite.name}.partial-*"), *base.glob(f".{suite.name}.old-*")):
            remove_tree(stale)
        debs = base / "debs" / suite.name
        debs.mkdir(parents=True, exist_ok=True)
        log = base / f"debootstrap-{suite.name}.log"
        reason = "recipe changed, rebuilding" if target.exists() else "first build"
        say(
            f"building {suite.release} ({suite.name}) rootfs in {target} "
            f"({reason}, a few minutes; log: {log})"
        )
        started = time.monotonic()
        partial = Path(tempfile.mkdtemp(prefix=f".{suite.name}.partial-", dir=base))
        try:
            partial.chmod(0o755)
            with progress.step(f"debootstrap {suite.name}", watch=partial):
                _debootstrap(suite, partial, debs, osrepo.mirror(), log, stop)
            unmount_under(partial)
            configure(partial, suite, osrepo.mirror())
            if target.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{suite.name}.old-", dir=base))
                old.rmdir()
                target.rename(old)
                partial.rename(target)
                remove_tree(old)
            else:
                partial.rename(target)
        except BaseException:
            remove_tree(partial)
            raise
        say(f"{suite.name} rootfs built in {time.monotonic() - started:.0f}s")
    say(f"rootfs ready: {target}")
    return target
