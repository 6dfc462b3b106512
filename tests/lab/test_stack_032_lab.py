"""Today's stack on the lab, behind the gateway, with the monitor running (`make test-slow`; the
"today's stacks" issue's proof). lab3 is the gateway (tools/lab.py up --gateways 1), lab4 the
monitor (--monitors 1), lab1 and lab2 serve; from the lab converged on cpu-vllm-0.12.0:

- the operator's one edit (`acceldeploy_stack: cpu-vllm-0.32.0` in group_vars) and site.yml:
  both hosts build 0.32.0's keyed environment and switch to it one at a time, while a client
  sends chats through the gateway at a steady rate: no request fails; verify passes (site.yml's
  last stage) and /version says 0.32.0 on both;
- the monitor's targets are all up, no alert fires, and the memory and KV series carry data
  from both hosts on 0.32.0;
- bench's smoke profile on 0.32.0 against the 0.12.0 baseline taken first says what changed;
- back to 0.12.0 and forward to 0.32.0 again under the same load, no request failing: each move
  a switch to the build kept beside, nothing installed.

Figures (each move's seconds per host, requests, the bench comparison) are printed; run with
`pytest -s`. The module leaves the lab on the inventory's stack, 0.12.0.

On this 2-core machine all four lab hosts and the client share two cores: the first run, at
the gateway proof's 4 chats a second with the CPU default start gate (300 s), saw lab1 carry
the whole load at 100 % CPU while lab2's 0.32.0 start missed the gate (the rollout stopped and
rolled lab2 back, as it should; docs/benchmarks/2026-11-28-todays-stacks.md). So this proof
sends STACK_RATE chats a second and gives each start START_TIMEOUT seconds
(`vllm_service_start_timeout`, the operator's setting for slow hosts); the assertions are the
same.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_run import PlaybookRun, run_playbook
from labhost import INVENTORY, lab_cli, on_host, prometheus_api
from rollout import built_anything
from test_gateway_rollout import Load, wait_all_up
from test_site_bench import LAB_TOLERANCE, bench

from acceldeploy_lab import cpuinfo

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SERVING, OLD, NEW = ("lab1", "lab2"), "cpu-vllm-0.12.0", "cpu-vllm-0.32.0"
VERSION = {OLD: "0.12.0", NEW: "0.32.0"}
STACK_RATE = 2.0  # chats a second through the gateway, for the whole of each move
START_TIMEOUT = 900  # seconds each start may take before its gate fails (cpu default 300)
# seconds the gate's completion may take: the 5th run's move back had lab1's fresh 0.12 engine
# miss the default 120 s while lab2 carried the whole load on the two shared cores
COMPLETION_TIMEOUT = 600
ENV_PYTHON = "/opt/acceldeploy/venv/bin/python"  # python_env's link to the serving build


def stack_inventory(tmp: Path, stack: str) -> Path:
    """The lab's inventory with `acceldeploy_stack` (and the start gate) in group_vars/all.yml."""
    tmp.mkdir(exist_ok=True)
    shutil.copy(INVENTORY, tmp / INVENTORY.name)
    shutil.copytree(INVENTORY.parent / "group_vars", tmp / "group_vars")
    group = tmp / "group_vars/all.yml"
    group.write_text(
        group.read_text()
        + f"\nacceldeploy_stack: {stack}\nvllm_service_start_timeout: {START_TIMEOUT}\n"
        + f"vllm_service_gate_completion_timeout: {COMPLETION_TIMEOUT}\n"
    )
    return tmp / INVENTORY.name


def served_version(host: str, port: int) -> str:
    return on_host(host, f"curl -sf http://127.0.0.1:{port}/version")


def move(inventory: Path, label: str) -> tuple[PlaybookRun, Load, float]:
    """site.yml with that inventory under a steady load through the gateway."""
    with Load(STACK_RATE) as load:
        time.sleep(10)
        began = time.monotonic()
        run = run_playbook("site.yml", inventory, timeout=3000)
        seconds = time.monotonic() - began
        time.sleep(10)
    failed = load.failed()
    print(f"\n[stack 0.32] {label}: {seconds:.0f} s, {len(load.records)} requests through the "
          f"gateway, {len(failed)} failed", flush=True)  # fmt: skip
    assert run.ok, run.output[-6000:]
    assert not failed, failed[:10]
    assert len(load.records) >= STACK_RATE * seconds * 0.9
    return run, load, seconds


@pytest.fixture(scope="module")
def fleet() -> Iterator[None]:
    # The proof holds on the CPU it ran on: vLLM's CPU kernels choose their paths by its flags.
    print(f"\n[stack 0.32] machine: {cpuinfo.summary()}", flush=True)
    lab_cli("up", "--hosts", "2", "--gateways", "1", "--monitors", "1")
    lab_cli("pin")  # each host on a core of its own, as on a fleet (acceldeploy_lab/cpupin.py)
    try:
        run = run_playbook("site.yml", INVENTORY, timeout=3000)
        assert run.ok, run.output[-6000:]
        wait_all_up()
        yield
    finally:
        back = run_playbook("site.yml", INVENTORY, timeout=3000)
        lab_cli("down", "--host", "lab3")
        lab_cli("down", "--host", "lab4")
        lab_cli("pin", "--off")
        assert back.ok, back.output[-4000:]


def test_0_12_to_0_32_and_back_and_forth_behind_the_gateway(fleet: None, tmp_path: Path) -> None:
    baseline_dir = tmp_path / "bench-0.12"
    code, output, _ = bench("--profile", "smoke", out=baseline_dir)
    assert code == 0, output[-3000:]
    (baseline,) = (p for p in baseline_dir.iterdir() if p.is_dir())

    new = stack_inventory(tmp_path, NEW)
    run, _, _ = move(new, "0.12.0 -> 0.32.0 (build beside, then switch)")
    assert {h for h, _ in built_anything(run)} <= set(SERVING) and built_anything(run), (
        "nothing built"
    )
    for index, host in enumerate(SERVING, start=1):
        assert '"0.32.0"' in served_version(host, 8000 + index), host
        # the stack's known defect amx-tile-permission worked around: every Python of the
        # environment (the serving vLLM's spawned workers too) ran the .pth line as it started
        ran = on_host(host, f"{ENV_PYTHON} -c \"import sys; print('ctypes' in sys.modules)\"")
        assert ran.strip() == "True", (host, ran)

    # the monitor: every target up, no alert firing, memory and KV from both hosts on 0.32
    wait_all_up()
    deadline = time.monotonic() + 120
    while True:
        active = prometheus_api("/api/v1/targets", state="active")["activeTargets"]
        down = [t["labels"] for t in active if t["health"] != "up"]
        firing = [a for a in prometheus_api("/api/v1/alerts")["alerts"] if a["state"] == "firing"]
        kv = prometheus_api("/api/v1/query", query='vllm:kv_cache_usage_perc{job="vllm"}')
        memory = prometheus_api(
            "/api/v1/query", query='acceldeploy_service_memory_bytes{source="pss"}'
        )
        hosts_kv = {r["metric"]["host"] for r in kv["result"]}
        hosts_memory = {r["metric"]["host"] for r in memory["result"]}
        settled = not down and set(SERVING) <= hosts_kv and set(SERVING) <= hosts_memory
        if settled or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert not down, down
    assert not firing, firing
    assert set(SERVING) <= hosts_kv and set(SERVING) <= hosts_memory, (hosts_kv, hosts_memory)

    code, output, _ = bench("--profile", "smoke", "--baseline", str(baseline), "--force",
                            *LAB_TOLERANCE, out=tmp_path / "bench-0.32", inventory=new)  # fmt: skip
    print(output[-2500:], flush=True)
    assert code in (0, 1), output[-3000:]  # compared: the same or regressed, said per figure
    assert f"against {baseline}" in output, output[-2000:]
    for host in SERVING:  # a verdict for each figure of each host
        assert f"{host}/qwen3-vl: request_throughput" in output, output[-2000:]

    back, _, _ = move(stack_inventory(tmp_path / "old", OLD), "0.32.0 -> 0.12.0 (the kept build)")
    assert built_anything(back) == [], built_anything(back)
    for index, host in enumerate(SERVING, start=1):
        assert '"0.12.0"' in served_version(host, 8000 + index), host
    forward, _, _ = move(new, "0.12.0 -> 0.32.0 again (the kept build)")
    assert built_anything(forward) == [], built_anything(forward)
    for index, host in enumerate(SERVING, start=1):
        assert '"0.32.0"' in served_version(host, 8000 + index), host
