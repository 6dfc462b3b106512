"""Prerequisite checks for the lab: each problem is one line saying what is missing and the fix."""

from __future__ import annotations

import errno
import os
import shutil
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MIN_FREE_GB = 10

BINARY_PACKAGES: dict[str, str] = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "mount": "mount",
    "umount": "mount",
    "ip": "iproute2",
    "nft": "nftables",
}


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str

    def line(self) -> str:
        return f"missing: {self.what} -> fix: {self.fix}"


class PrereqError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(p.line() for p in problems))
        self.problems = problems


def require(problems: Iterable[Problem]) -> None:
    found = list(problems)
    if found:
        raise PrereqError(found)


def check_root() -> list[Problem]:
    if os.geteuid() == 0:
        return []
    return [Problem("root privileges", "run it as root: sudo .venv/bin/python tools/lab.py ...")]


def check_binaries(names: Iterable[str]) -> list[Problem]:
    problems = []
    for name in names:
        if shutil.which(name) is None:
            package = BINARY_PACKAGES.get(name, name)
            problems.append(Problem(f"the `{name}` command", f"apt-get install -y {package}"))
    return problems


def check_overlayfs() -> list[Problem]:
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        filesystems = ""
    if any(line.split()[-1:] == ["overlay"] for line in filesystems.splitlines()):
        return []
    return [Problem("overlayfs support in the kernel", "modprobe overlay (CONFIG_OVERLAY_FS)")]


def check_cgroup2() -> list[Problem]:
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        mountinfo = ""
    for line in mountinfo.splitlines():
        _, _, tail = line.partition(" - ")
        if tail.split(" ", 1)[0] == "cgroup2":
            return []
    return [
        Problem(
            "a mounted cgroup2 hierarchy (needed for SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1)",
            "mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 none /sys/fs/cgroup/unified",
        )
    ]


def existing_parent(path: Path) -> Path:
    current = path
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def check_disk(path: Path, min_gb: int = MIN_FREE_GB) -> list[Problem]:
    probe = existing_parent(path)
    usage = shutil.disk_usage(probe)
    free_gb = usage.free / 1024**3
    if free_gb >= min_gb:
        return []
    return [
        Problem(
            f"{min_gb} GB free for {path} (the filesystem of {probe} has {free_gb:.1f} GB)",
            f"free space there or point ACCELDEPLOY_CACHE at a filesystem with >= {min_gb} GB",
        )
    ]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def check_ports_free(ports: Iterable[int]) -> list[Problem]:
    problems = []
    for port in ports:
        if not 1024 <= port <= 65535:
            problems.append(
                Problem(f"a usable ssh port ({port})", "pick --base-port in 1024-65535")
            )
        elif port_in_use(port):
            problems.append(
                Problem(
                    f"free port 127.0.0.1:{port} (in use: ss -ltnp 'sport = :{port}')",
                    "stop that listener or pick another --base-port",
                )
            )
    return problems


def check_paths_exist(paths: Iterable[Path]) -> list[Problem]:
    return [
        Problem(f"bind mount source {p}", "create it or fix the --bind-ro SRC:DST argument")
        for p in paths
        if not p.exists()
    ]
