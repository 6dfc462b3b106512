"""End to end: `ansible-playbook site.yml -i inventory/lab` serves the tiny Qwen3-VL with real
vLLM on every lab host and ends with tools/verify.py passing; a second run changes nothing.
Run after the role tests (`make test`: -m e2e)."""

from __future__ import annotations

import time

import pytest
from ansible_run import run_playbook
from labhost import INVENTORY, on_host

pytestmark = pytest.mark.e2e

HOSTS = ("lab1", "lab2")


def test_site_serves_every_host_and_converges() -> None:
    started = time.monotonic()
    first = run_playbook("site.yml", INVENTORY, timeout=3000)
    assert first.ok, first.output[-6000:]
    print(f"site.yml first run: {time.monotonic() - started:.0f}s")
    # what the lab tests before it left for site.yml to change (the time it costs)
    print(sorted({(host, task) for task, host, r in first.iter_results() if r.get("changed")}))
    for host in HOSTS:
        assert on_host(host, "systemctl is-active qwen3-vl").strip() == "active"
        assert on_host(host, "systemctl is-enabled qwen3-vl").strip() == "enabled"

    pids = {h: on_host(h, "systemctl show -p MainPID --value qwen3-vl").strip() for h in HOSTS}
    started = time.monotonic()
    second = run_playbook("site.yml", INVENTORY, timeout=3000)
    assert second.ok, second.output[-6000:]
    print(f"site.yml second run: {time.monotonic() - started:.0f}s")
    for host in HOSTS:
        assert second.changed(host) == 0, second.output[-6000:]
        assert on_host(host, "systemctl show -p MainPID --value qwen3-vl").strip() == pids[host]


def test_systemctl_stop_start_status_behave() -> None:
    on_host("lab2", "systemctl stop qwen3-vl")
    assert on_host("lab2", "systemctl is-active qwen3-vl", check=False).strip() == "inactive"
    on_host("lab2", "systemctl start qwen3-vl", timeout=400)
    status = on_host("lab2", "systemctl status qwen3-vl --no-pager", check=False)
    assert "active (running)" in status
