"""Detached helper servers of the lab (HF mirror, ModelScope mirror, wheel server): start
one in its own session with a pid file, wait until it answers, stop it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy_lab import pythonpath
from acceldeploy_lab.processes import pid_alive


@dataclass(frozen=True)
class Daemon:
    """One server: what to call it, its pid file and output log, and a string its command
    line must contain (so a recycled pid is never taken for it)."""

    name: str
    pid_file: Path
    log_file: Path
    marker: str


def running_pid(daemon: Daemon) -> int | None:
    try:
        pid = int(daemon.pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if pid_alive(pid) and daemon.marker.encode() in cmdline:
        return pid
    return None


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(
    daemon: Daemon,
    argv: Sequence[str],
    ready: Callable[[], bool],
    error: type[Exception],
    timeout: float = 30.0,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """Starts ``argv`` detached unless the daemon already runs; waits until ``ready()``.
    Raises ``error`` with the end of its log when it exits or never answers."""
    pid = running_pid(daemon)
    if pid is not None:
        return {"pid": pid, "started": False}
    daemon.log_file.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=pythonpath(), PYTHONUNBUFFERED="1")
    with daemon.log_file.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    daemon.pid_file.write_text(f"{proc.pid}\n")
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        if proc.poll() is not None:
            raise error(
                f"{daemon.name} exited {proc.returncode} at start-up; see {daemon.log_file}:\n"
                + tail(daemon.log_file)
            )
        # ready once the child runs argv (exec done: stop() finds it by its marker) and answers
        if running_pid(daemon) == proc.pid and ready():
            return {
                "pid": proc.pid,
                "started": True,
                "seconds": round(time.monotonic() - started, 2),
            }
        time.sleep(0.1)
    stop(daemon)
    raise error(f"{daemon.name} did not answer within {timeout:.0f}s; see {daemon.log_file}")


def stop(daemon: Daemon, timeout: float = 10.0) -> bool:
    """Stops the daemon of this pid file; True if one was running."""
    pid = running_pid(daemon)
    daemon.pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    # A server this process started stays a zombie until reaped: dead, not "still stopping".
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)  # reaps a server this process started, also after the SIGKILL
    return True
