"""Processes and cgroups of the lab hosts: find, stop and kill what a host runs.

Each host lives in its own cgroup (acceldeploy-<host>) in every hierarchy systemd-nspawn uses
(cgroup2 and, on hybrid hosts, the v1 name=systemd one), so two containers never share cgroups
and everything a host runs can be found and killed. The supervisor and systemd-nspawn are also
found through /proc, checked against their command lines. hosts.py uses these helpers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from acceldeploy_lab import rootfs

MACHINE_PREFIX = "acceldeploy-"
# A second, independent lab on the same machine: its own prefix, state dir and ports.
HOST_PREFIX = os.environ.get("ACCELDEPLOY_LAB_PREFIX", "lab")
KILL_TIMEOUT = 10.0


class LabError(Exception):
    pass


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    stat = _read_text(Path(f"/proc/{pid}/stat"))
    if stat is None:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: int) -> list[str]:
    raw = _read_text(Path(f"/proc/{pid}/cmdline"))
    return raw.rstrip("\0").split("\0") if raw else []


def _read_pid(path: Path) -> int | None:
    text = _read_text(path)
    try:
        return int(text) if text else None
    except ValueError:
        return None


def supervisor_pid(run: Path) -> int | None:
    """The pid of the host's live supervisor, checked against its command line."""
    pid = _read_pid(run / "supervisor.pid")
    if pid is None or not pid_alive(pid):
        return None
    argv = _cmdline(pid)
    if "supervise" in argv and str(run) in argv:
        return pid
    return None


def nspawn_pids(machine: str | None = None) -> dict[int, str]:
    """systemd-nspawn processes of lab machines (all of them, or the one named)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if not argv or Path(argv[0]).name != "systemd-nspawn":
            continue
        for arg in argv[1:]:
            name = arg.removeprefix("--machine=")
            if name == arg or not name.startswith(MACHINE_PREFIX + HOST_PREFIX):
                continue
            if machine is None or name == machine:
                found[int(entry.name)] = name
    return found


def _cgroup_roots() -> list[Path]:
    """The unified (cgroup2) hierarchy and, on hybrid hosts, the v1 name=systemd one."""
    unified: Path | None = None
    named: Path | None = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fstype, _, rest = tail.partition(" ")
        point = Path(rootfs._unescape_mountinfo(head.split(" ")[4]))
        if fstype == "cgroup2" and unified is None:
            unified = point
        elif fstype == "cgroup" and "name=systemd" in rest.split(" ")[-1].split(",") and not named:
            named = point
    return [p for p in (unified, named) if p is not None]


def host_cgroups(machine: str) -> list[Path]:
    return [root / machine for root in _cgroup_roots()]


def join_cgroups(machine: str) -> None:
    for group in host_cgroups(machine):
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(f"{os.getpid()}\n")


def cgroup_pids(machine: str) -> set[int]:
    pids: set[int] = set()
    for group in host_cgroups(machine):
        if not group.is_dir():
            continue
        for dirpath, _, _ in os.walk(group):
            procs = _read_text(Path(dirpath) / "cgroup.procs") or ""
            pids.update(int(p) for p in procs.split())
    return pids


def prune_cgroups(machine: str, keep_top: bool) -> None:
    for group in host_cgroups(machine):
        if not group.is_dir():
            continue
        for dirpath, _, _ in sorted(os.walk(group), key=lambda w: len(w[0]), reverse=True):
            if keep_top and Path(dirpath) == group:
                continue
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def kill_host_processes(machine: str, supervisor: int | None) -> None:
    for group in host_cgroups(machine):
        kill_file = group / "cgroup.kill"
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1\n")
    deadline = time.monotonic() + KILL_TIMEOUT
    while True:
        pids = cgroup_pids(machine) | set(nspawn_pids(machine))
        if supervisor is not None and pid_alive(supervisor):
            pids.add(supervisor)
        pids = {p for p in pids if pid_alive(p)}
        if not pids:
            return
        if time.monotonic() > deadline:
            raise LabError(f"{machine}: processes survive SIGKILL: {sorted(pids)}")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def cgroup_hosts() -> set[str]:
    """Names (MACHINE_PREFIX stripped) of the acceldeploy-* cgroups present in any hierarchy."""
    names: set[str] = set()
    for root in _cgroup_roots():
        groups = root.iterdir() if root.is_dir() else iter(())
        names.update(
            g.name[len(MACHINE_PREFIX) :] for g in groups if g.name.startswith(MACHINE_PREFIX)
        )
    return names


def request_stop(run: Path, machine: str) -> int | None:
    """SIGTERM the host's supervisor (or, without one, its systemd-nspawn); its pid or None."""
    pid = supervisor_pid(run)
    targets = [pid] if pid is not None else list(nspawn_pids(machine))
    for target in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGTERM)
    return pid


def wait_stopped(machine: str, supervisor: int | None, deadline: float) -> bool:
    """Wait (until deadline) for the supervisor and systemd-nspawn to exit; False if any of
    them or anything else in the host's cgroups is still alive then."""
    while time.monotonic() < deadline and (
        (supervisor is not None and pid_alive(supervisor)) or nspawn_pids(machine)
    ):
        time.sleep(0.1)
    leftovers = {p for p in cgroup_pids(machine) | set(nspawn_pids(machine)) if pid_alive(p)}
    return not ((supervisor is not None and pid_alive(supervisor)) or leftovers)
