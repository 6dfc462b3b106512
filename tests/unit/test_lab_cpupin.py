"""tools/lab.py pin (acceldeploy_lab.cpupin): which CPU each lab host gets, and setting a real
thread's affinity (this test's own process, put back after)."""

from __future__ import annotations

import os

from acceldeploy_lab import cpupin


def test_hosts_take_the_cpus_in_turn() -> None:
    assert [cpupin.cpu_of(f"lab{i}", [0, 1]) for i in (1, 2, 3, 4)] == [0, 1, 0, 1]
    assert cpupin.cpu_of("lab2", [4, 5, 6]) == 5


def test_every_thread_of_a_process_is_set() -> None:
    before = os.sched_getaffinity(0)
    one = {min(before)}
    try:
        assert cpupin.set_affinity(os.getpid(), one) >= 1
        assert os.sched_getaffinity(0) == one
    finally:
        cpupin.set_affinity(os.getpid(), before)
    assert os.sched_getaffinity(0) == before
