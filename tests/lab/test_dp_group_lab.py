"""Data parallel across the two lab hosts (inventory/lab-dp: nodes [lab1, lab2], backend mp),
with the real vLLM 0.12.0 and a gateway on lab3 (tools/lab.py up --hosts 2 --gateways 1):
site.yml starts the head's vLLM (API server and rank 0) on lab1 and the headless rank
`dp-qwen3-vl-dp` on lab2, each only after the group's readiness gate passed on both nodes;

- requests sent to lab1's API server are served by both ranks (the head's /metrics counts
  each engine's requests: engine 1 is lab2's); a second run changes nothing; verify passes;
- the gate refuses a flag change while lab2 cannot reach the head's RPC port (an nftables
  drop of new connections to it): the refusal names lab2, the address and the port, before
  any unit restarted: both units keep their processes and their last good launchers, and the
  group keeps serving;
- a flag the engine cannot start with, rolled to the group: the head misses its gate and the
  whole group goes back to its last good set (lab2's rank too), serving again on both ranks;
- the kill drill: once the steady load through the gateway is answered (warmed_up), lab2's
  rank killed with SIGKILL; every failed request fails fast (ERROR_BOUND), none hangs, and the
  group serves again by itself within HEAL_BOUND, both ranks in it.

The drill's figures go to $ACCELDEPLOY_CACHE/logs/dp-kill-drill.json; docs/operations/
multi-node.md has the measured ones."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import ROOT, haproxy_servers, lab_cli, nft_drop, on_host, verify_report
from test_gateway_rollout import Load
from vllm_client import chat

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INVENTORY = ROOT / "inventory/lab-dp"
SERVICE = "qwen3-vl-dp"
RANK = f"dp-{SERVICE}"
BASE = "http://127.0.0.1:8021"
ENDPOINT = "http://127.0.0.1:9021/v1/chat/completions"  # lab-dp's gateway_frontends, on lab3
HEAD_RPC = ("127.0.0.21", 13389)
ERROR_BOUND = 5.0  # seconds: a request the group cannot serve gets its error within this
HEAL_BOUND = 180.0  # seconds from the kill until the group serves again by itself
RATE = 2.0  # chats a second through the gateway during the drill
WARM_ANSWERS = 10  # answers in a row, each within 5 s, before the kill
WARM_BOUND = 120.0  # seconds the group may take to serve the steady load at all
RESULTS = Path(os.environ.get("ACCELDEPLOY_CACHE") or "/var/cache/acceldeploy") / "logs"
SUCCESS = re.compile(r'^vllm:request_success_total\{engine="(\d+)",([^}]*)\} ([0-9.]+)$', re.M)


def verify() -> tuple[int, dict]:
    return verify_report(INVENTORY)


def served_by_engine() -> dict[str, float]:
    """{engine index: requests it finished}, from the head's /metrics."""
    text = on_host("lab1", f"curl -sf {BASE}/metrics")
    counts: dict[str, float] = {}
    for engine, _, value in SUCCESS.findall(text):
        counts[engine] = counts.get(engine, 0.0) + float(value)
    return counts


@pytest.fixture(scope="module")
def deployed() -> Iterator[None]:
    lab_cli("up", "--hosts", "2", "--gateways", "1")
    try:
        run = run_playbook("site.yml", INVENTORY, timeout=2400)
        assert run.ok, run.output[-8000:]
        yield
    finally:
        lab_cli("down", "--host", "lab3")


def main_pid(host: str, unit: str) -> str:
    return on_host(host, f"systemctl show -p MainPID --value {unit}").strip()


def restarts(host: str, unit: str) -> int:
    return int(on_host(host, f"systemctl show -p NRestarts --value {unit}").strip())


def launcher_digest(host: str, unit: str) -> str:
    """The sha256 of the launcher the unit runs (its ExecStart path)."""
    path = "$(systemctl show -p ExecStart --value {} | sed -n 's/.*path=\\([^ ;]*\\).*/\\1/p')"
    return on_host(host, f"sha256sum {path.format(unit)}").split()[0]


def group_state() -> dict[str, tuple[str, str]]:
    return {host: (main_pid(host, unit), launcher_digest(host, unit))
            for host, unit in (("lab1", SERVICE), ("lab2", RANK))}  # fmt: skip


def changed_inventory(tmp: Path, extra_args: dict[str, object]) -> Path:
    """inventory/lab-dp with the group's service given extra_args."""
    shutil.copytree(INVENTORY, tmp / "lab-dp", symlinks=False)
    group_file = tmp / "lab-dp/group_vars/all.yml"
    group = yaml.safe_load(group_file.read_text())
    group["acceldeploy_services"][0]["extra_args"] = extra_args
    group_file.write_text(yaml.safe_dump(group, sort_keys=False))
    return tmp / "lab-dp"


def test_two_ranks_over_two_hosts_serve_through_the_heads_api(deployed: None) -> None:
    assert on_host("lab1", f"systemctl is-active {SERVICE}").strip() == "active"
    assert on_host("lab2", f"systemctl is-active {RANK}").strip() == "active"
    assert on_host("lab2", f"systemctl is-active {SERVICE} || true").strip() != "active"
    rank_log = on_host("lab2", f"journalctl -u {RANK} -o cat --no-pager")
    assert "in headless mode, with head node address tcp://127.0.0.21:13389" in rank_log
    before = served_by_engine()
    for n in range(8):
        reply = chat(BASE, SERVICE, f"Hello {n}", max_tokens=4)
        assert reply["choices"][0]["finish_reason"] in ("length", "stop")
    after = served_by_engine()
    done = {e: after.get(e, 0.0) - before.get(e, 0.0) for e in after}
    print(f"\n[dp group] requests finished per engine: {done}", flush=True)
    assert sum(done.values()) == 8, done
    assert done.get("1", 0) > 0, f"lab2's rank served nothing: {done}"


def test_a_rerun_changes_nothing_and_verify_passes(deployed: None) -> None:
    second = run_playbook("site.yml", INVENTORY, timeout=1200)
    assert second.ok, second.output[-6000:]
    assert second.changed("lab1") == 0 and second.changed("lab2") == 0, second.output[-6000:]
    code, report = verify()
    assert code == 0, [c for c in report["checks"] if c["status"] == "fail"]
    rank = {c["name"]: c["status"] for c in report["checks"]
            if c["host"] == "lab2" and c["service"] == RANK}  # fmt: skip
    assert rank.get("unit") == "pass" and rank.get("journal") == "pass", rank


def test_the_gate_refuses_a_worker_that_cannot_reach_the_head_before_any_restart(
    deployed: None, tmp_path: Path
) -> None:
    before = group_state()
    changed = changed_inventory(tmp_path, {"max-num-seqs": 8})
    # new connections only: the group's established ones go on
    with nft_drop(f"ip daddr {HEAD_RPC[0]} tcp dport {HEAD_RPC[1]} ct state new"):
        run = run_playbook("site.yml", changed, timeout=1800)
    assert not run.ok
    address = f"{HEAD_RPC[0]}:{HEAD_RPC[1]}"
    refusal = f"lab2: cannot reach lab1 at {address} (the head's data-parallel RPC port"
    assert refusal in run.output and "a firewall drops it" in run.output, run.output[-6000:]
    assert group_state() == before, "a unit of the group restarted or kept the refused launcher"
    reply = chat(ENDPOINT.rsplit("/v1/", 1)[0], SERVICE, "still serving?", max_tokens=4)
    assert reply["choices"][0]["finish_reason"] in ("length", "stop")
    back = run_playbook("site.yml", INVENTORY, timeout=1800)
    assert back.ok, back.output[-6000:]
    assert group_state() == before, "the run after the refusal restarted an unchanged group"


def test_a_group_that_fails_its_gate_rolls_back_as_one(deployed: None, tmp_path: Path) -> None:
    """A flag vLLM's parser takes but the engine cannot start with: lab2's rank restarts on it
    first, then the head misses its gate; lab2's rank goes back to its last good set with the
    head's, and the group serves again."""
    launchers = {host: digest for host, (_, digest) in group_state().items()}
    bad = changed_inventory(tmp_path, {"tokenizer": "/nonexistent/tokenizer"})
    run = run_playbook("site.yml", bad, timeout=2400)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dp-group-rollback.log").write_text(run.output)
    assert not run.ok
    assert "did not become ready on lab1" in run.output, run.output[-6000:]
    assert f"Rolled back on lab1: {SERVICE} serve again" in run.output, run.output[-6000:]
    said = f"Its group rolls back as one: lab2: {RANK} restarted on its last good unit"
    assert said in run.output, run.output[-6000:]
    assert {host: digest for host, (_, digest) in group_state().items()} == launchers
    # back in the gateway's rotation, its gate passed again
    deadline = time.monotonic() + 60
    while haproxy_servers("lab3", SERVICE)["lab1"]["status"] != "UP":
        assert time.monotonic() < deadline, haproxy_servers("lab3", SERVICE)
        time.sleep(2)
    before = served_by_engine()
    for n in range(4):
        chat(BASE, SERVICE, f"Back {n}", max_tokens=4)
    done = {e: v - before.get(e, 0.0) for e, v in served_by_engine().items()}
    assert sum(done.values()) == 4 and done.get("1", 0) > 0, done


def warmed_up(load: Load) -> float:
    """Seconds until the steady load is answered: the last WARM_ANSWERS requests all 200 within
    5 s each. A group formed seconds before (the rollback proof's) stalls on its first
    concurrent requests (~30 s on this lab, all of them answered), and a kill inside that stall
    would fail requests that were on their way to an answer."""
    began = time.monotonic()
    while True:
        time.sleep(1)
        recent = list(load.records)[-WARM_ANSWERS:]
        if len(recent) == WARM_ANSWERS and all(
            r["outcome"] == 200 and r["latency"] < 5 for r in recent
        ):
            return time.monotonic() - began
        assert time.monotonic() < began + WARM_BOUND, f"not serving the load: {recent}"


def test_a_killed_rank_heals_the_group_by_itself_and_no_client_hangs(deployed: None) -> None:
    pids, counts = (
        group_state(),
        {h: restarts(h, u) for h, u in (("lab1", SERVICE), ("lab2", RANK))},
    )
    with Load(RATE, ENDPOINT, SERVICE) as load:
        warm = warmed_up(load)
        time.sleep(10)
        killed = time.monotonic()
        on_host("lab2", f"systemctl kill -s KILL {RANK}")
        deadline, healed = killed + HEAL_BOUND + 60, None
        while time.monotonic() < deadline:
            time.sleep(1)
            after = [r for r in list(load.records) if r["sent"] >= killed]
            failed_at = max((r["sent"] for r in after if r["outcome"] != 200), default=killed)
            good = [r for r in after if r["sent"] > failed_at and r["outcome"] == 200]
            if failed_at > killed and len(good) >= RATE * 15:
                healed = min(r["sent"] for r in good) - killed
                break
    records = load.records
    steady = [r for r in records if r["sent"] < killed]
    failed = [r for r in records if r["outcome"] != 200]
    figures = {
        "warm_s": warm,
        "requests": len(records), "steady_failed": sum(r["outcome"] != 200 for r in steady),
        "failed": len(failed), "healed_s": healed,
        "slowest_error_s": max((r["latency"] for r in failed), default=0.0),
        "slowest_answer_s": max(r["latency"] for r in records),
        "outcomes": sorted({str(r["outcome"]) for r in failed}),
        "restarts": {h: restarts(h, u) - counts[h] for h, u in (("lab1", SERVICE), ("lab2", RANK))},
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dp-kill-drill.json").write_text(json.dumps(figures, indent=2))
    print(f"\n[dp kill drill] {json.dumps(figures)}", flush=True)
    assert figures["steady_failed"] == 0, figures
    assert healed is not None and healed < HEAL_BOUND, figures
    assert figures["slowest_error_s"] < ERROR_BOUND, figures
    assert figures["slowest_answer_s"] < 60, figures  # answered, never hung
    assert figures["restarts"]["lab2"] >= 1 and figures["restarts"]["lab1"] >= 1, figures
    assert group_state()["lab1"][0] != pids["lab1"][0], "the head did not restart with its rank"
    before = served_by_engine()
    for n in range(8):
        chat(BASE, SERVICE, f"Hello again {n}", max_tokens=4)
    done = {e: v - before.get(e, 0.0) for e, v in served_by_engine().items()}
    assert done.get("1", 0) > 0, f"lab2's rank does not serve after the drill: {done}"
