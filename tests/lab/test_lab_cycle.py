"""`down` leaves nothing behind and a second `up` reuses the cache: run last (`make test`
does, with -m labcycle), since it restarts the lab's hosts."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.labcycle

ROOT = Path(__file__).resolve().parents[2]
LAB = [sys.executable, str(ROOT / "tools" / "lab.py")]
SSH_PORTS = (2201, 2202)


def lab(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LAB, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def nspawn_processes() -> list[str]:
    """This lab's nspawn processes (another lab on the machine has another prefix)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, NotADirectoryError, PermissionError, ProcessLookupError):
            continue
        if (
            cmdline
            and cmdline[0].endswith(b"systemd-nspawn")
            and any(arg.startswith(b"--machine=acceldeploy-lab") for arg in cmdline)
        ):
            found.append(b" ".join(cmdline).decode(errors="replace"))
    return found


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_down_leaves_nothing_and_second_up_is_fast() -> None:
    lab("down")
    assert nspawn_processes() == []
    assert all(port_free(p) for p in SSH_PORTS)
    mounts = Path("/proc/mounts").read_text()
    assert "/run/acceldeploy-lab/" not in mounts

    started = time.monotonic()
    lab("up", "--hosts", "2")
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"second up took {elapsed:.1f}s"
    for host in ("lab1", "lab2"):
        state = lab("ssh", host, "systemctl", "is-system-running").stdout.strip()
        assert state == "running"
    print(f"second up: {elapsed:.1f}s")
