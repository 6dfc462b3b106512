"""`tools/lab.py pin`: each running lab host on a CPU of its own, as separate machines are.

The lab's hosts share this machine's cores, so two vLLM engines on two hosts fight over the
same cores, which never happens on a fleet. Measured on the 2-core lab (2026-11-28): vLLM
0.32's CPU worker on lab2 serving 2 chats a second held a core at 100 % (in the kernel: top -H),
and lab1's fresh vLLM 0.12 engine, its threads bound to both cores, answered no completion in
240 s (in 600 s during the stack proof); with lab1 on CPU 0 and lab2 on CPU 1, the same restart
was ready in 17 s and answered in 13 s.

lab<i> gets CPU (i - 1) mod N. Every thread of every process in the host's cgroup is set, the
host's systemd included, so what it starts later inherits it; `pin --off` gives every host all
CPUs again. The stack proof (tests/lab/test_stack_032_lab.py) pins the lab for its duration.
A data-parallel rank cannot run pinned: vLLM 0.12's CPU worker binds a DP rank's threads by
NUMA node and refuses a one-CPU host ("No enough allowed NUMA nodes to bind threads")."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from acceldeploy_lab.hosts import LabPaths, host_index, running_hosts
from acceldeploy_lab.processes import MACHINE_PREFIX, cgroup_pids


def cpu_of(name: str, cpus: list[int]) -> int:
    return cpus[(host_index(name) - 1) % len(cpus)]


def set_affinity(pid: int, cpus: set[int]) -> int:
    """Every thread of pid on cpus; how many were set (a thread may end meanwhile)."""
    done = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), cpus)
                done += 1
    return done


def pin(paths: LabPaths, off: bool = False) -> dict[str, str]:
    """{host: what it runs on now} for every running host."""
    every = sorted(os.sched_getaffinity(0))
    out = {}
    for name in running_hosts(paths):
        cpus = set(every) if off else {cpu_of(name, every)}
        threads = sum(set_affinity(p, cpus) for p in cgroup_pids(MACHINE_PREFIX + name))
        out[name] = f"CPU {','.join(map(str, sorted(cpus)))} ({threads} threads)"
    return out
