"""One endpoint (roles/gateway) on a lab host of its own: lab3, in the gateways group (tools/
lab.py up --gateways 1), where no vLLM goes. site.yml deploys HAProxy there, from the lab's own
apt repository, in front of lab1's and lab2's services; a second run changes nothing on any
host; verify checks the gateway (each backend UP, a real completion through the endpoint) and
names a drained backend with its host; requests through the endpoint reach both hosts; a
misconfigured frontend is refused in preflight, naming the variable, before any host changes.
Run after test_site.py (the served lab)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, haproxy, haproxy_servers, lab_cli, on_host
from vllm_client import chat

pytestmark = pytest.mark.e2e

GATEWAY = "lab3"
SERVING = ("lab1", "lab2")
ENDPOINT = "http://127.0.0.1:9001"  # the lab's gateway_frontends; the lab shares one network
CONFIG = "/etc/haproxy/haproxy.cfg"


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    lab_cli("up", "--hosts", "2", "--gateways", "1")
    try:
        yield GATEWAY
    finally:
        lab_cli("down", "--host", GATEWAY)


def admin(command: str) -> str:
    return haproxy(GATEWAY, command)


def served_by() -> dict[str, int]:
    """Each backend server's total sessions, from HAProxy's own counters."""
    found = haproxy_servers(GATEWAY, "qwen3-vl")
    return {server: int(row["stot"]) for server, row in found.items() if server in SERVING}


def verify() -> tuple[int, list[dict]]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/verify.py"), "-i", str(INVENTORY), "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)["checks"]


def config_digest() -> str:
    return hashlib.sha256(on_host(GATEWAY, f"cat {CONFIG}").encode()).hexdigest()


def test_site_deploys_the_gateway_and_a_second_run_changes_nothing(gateway: str) -> None:
    preview = run_playbook("playbooks/gateway.yml", INVENTORY, check=True, diff=True)
    assert preview.ok, preview.output[-4000:]  # on the bare gateway host
    first = run_playbook("site.yml", INVENTORY, timeout=3000)
    assert first.ok, first.output[-6000:]
    assert first.changed(GATEWAY) > 0
    second = run_playbook("site.yml", INVENTORY, timeout=3000)
    assert second.ok, second.output[-6000:]
    assert {h: second.changed(h) for h in (*SERVING, GATEWAY)} == dict.fromkeys(
        (*SERVING, GATEWAY), 0
    ), second.drift()
    again = run_playbook("playbooks/gateway.yml", INVENTORY, check=True, diff=True)
    assert again.ok and again.changed(GATEWAY) == 0, again.output[-4000:]
    assert on_host(GATEWAY, "systemctl is-active haproxy").strip() == "active"
    assert on_host(GATEWAY, "ls /etc/systemd/system | grep -c qwen3-vl || true").strip() == "0"
    keys = on_host(GATEWAY, "stat -c '%a %U' /etc/haproxy/acceldeploy-backend-keys.map")
    assert keys.strip() == "600 root"
    # A hand edit is drift: the no-op path's one call finds it, the role's full path repairs it.
    on_host(GATEWAY, f"echo '# edited by hand' >> {CONFIG}")
    repaired = run_playbook("playbooks/gateway.yml", INVENTORY, timeout=900)
    assert repaired.ok, repaired.output[-4000:]
    assert repaired.drift()[GATEWAY] == [f"{CONFIG} changed"], repaired.drift()
    assert "edited by hand" not in on_host(GATEWAY, f"cat {CONFIG}")


def test_the_endpoint_reaches_both_hosts_and_verify_checks_it(gateway: str) -> None:
    before = served_by()
    for _ in range(12):
        chat(ENDPOINT, "qwen3-vl", "Hello", max_tokens=4)
    after = served_by()
    assert all(after[h] > before.get(h, 0) for h in SERVING), (before, after)
    code, checks = verify()
    mine = [c for c in checks if c["host"] == GATEWAY]
    assert code == 0, [c for c in checks if c["status"] == "fail"]
    assert {c["name"] for c in mine} >= {"backend lab1", "backend lab2", "gateway chat"}


def test_verify_names_a_drained_backend_with_its_host(gateway: str) -> None:
    admin("set server qwen3-vl/lab2 state drain")
    try:
        code, checks = verify()
        failed = [(c["host"], c["name"], c["detail"]) for c in checks if c["status"] == "fail"]
        assert code == 1 and len(failed) == 1, failed
        assert failed[0][:2] == (GATEWAY, "backend lab2") and "DRAIN" in failed[0][2]
        chat(ENDPOINT, "qwen3-vl", "Hello", max_tokens=4)  # lab1 still serves
    finally:
        admin("set server qwen3-vl/lab2 state ready")


def test_a_tool_takes_a_service_out_of_rotation_and_back_over_ssh(gateway: str) -> None:
    """What tune does around its restarts (acceldeploy.tune.rotation), on the real HAProxy."""
    sys.path.insert(0, str(ROOT / "tools"))
    from acceldeploy.serving import selection
    from acceldeploy.tune import rotation

    every = selection.every_host(str(INVENTORY))
    entries = rotation.where(every, "lab2", "qwen3-vl")
    assert entries == [{"gateway": GATEWAY, "socket": "/run/haproxy/admin.sock",
                        "service": "qwen3-vl"}]  # fmt: skip
    try:
        assert rotation.set_state(every, entries, "lab2", "drain", 30) == []
        assert haproxy_servers(GATEWAY, "qwen3-vl")["lab2"]["status"] == "DRAIN"
    finally:
        assert rotation.set_state(every, entries, "lab2", "ready", 30) == []
    assert haproxy_servers(GATEWAY, "qwen3-vl")["lab2"]["status"] == "UP"
    wrong = [{**entries[0], "service": "nope"}]
    (said,) = rotation.set_state(every, wrong, "lab2", "drain", 30)
    assert said.startswith(f"{GATEWAY}: `set server nope/lab2 state drain`: No such backend")


def test_bench_via_the_gateway_is_one_run_that_loads_both_hosts(
    gateway: str, tmp_path: Path
) -> None:
    before = served_by()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench.py"), "-i", str(INVENTORY), "--profile", "smoke",
         "--via-gateway", GATEWAY, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    after = served_by()
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    (service,) = summary["services"]
    assert (service["host"], service["service"]) == (GATEWAY, "qwen3-vl")
    assert service["via"] == {"gateway": GATEWAY, "url": ENDPOINT, "servers": list(SERVING),
                              "load_from": "lab1"}  # fmt: skip
    (point,) = service["points"]
    assert [r["completed"] for r in point["runs"]] == [30, 30, 30]
    assert point["median"]["request_throughput"] > 0
    # every request went through HAProxy, and it spread them over both hosts
    sent = {h: after[h] - before.get(h, 0) for h in SERVING}
    assert all(n > 0 for n in sent.values()) and sum(sent.values()) >= 90, sent
    assert (run / GATEWAY / "qwen3-vl" / "memory.png").stat().st_size > 0


def conversations(inventory: Path, out: Path, *via: str) -> dict:
    """`bench --profile conversations-short` (multi-turn chats, inventory below), through the
    gateway (`via`) or on lab1 alone: the service's summary."""
    where = ["--via-gateway", *via] if via else ["--limit", "lab1"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench.py"), "-i", str(inventory), "--profile",
         "conversations-short", *where, "--out", str(out)],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    (service,) = json.loads((run / "summary.json").read_text())["services"]
    (point,) = service["points"]
    assert [(r["completed"], r["failed"]) for r in point["runs"]] == [(64, 0), (64, 0)]
    return service


def test_affinity_routing_keeps_each_conversation_where_its_prefix_is_cached(
    gateway: str, tmp_path: Path
) -> None:
    """Multi-turn chats through the gateway (bench's conversations dataset: 16 users a round,
    4 turns each with think time, one shared system prompt, an image in each first turn): with
    `gateway_routing: affinity` the fleet's prefix-cache hit rate is within 10% of what lab1
    alone gets on the same shape of load, and above least connections', whose next turn finds
    the other host half the time. Then the gateway goes back to the lab's routing."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").symlink_to(INVENTORY)
    profile = {"dataset": "conversations", "prompts": 16, "turns": 4, "system_len": 60,
               "input_len": 40, "output_len": 32, "first_image": True, "think_time": 1.0,
               "max_concurrency": 4, "rounds": 2}  # fmt: skip
    (inventory / "group_vars" / "all.yml").write_text(
        (INVENTORY.parent / "group_vars" / "all.yml").read_text()
        + yaml.safe_dump({"acceldeploy_bench_profiles": {"conversations-short": profile}})
    )
    least = conversations(inventory, tmp_path / "least", GATEWAY)
    try:
        affine = run_playbook("playbooks/gateway.yml", INVENTORY, {"gateway_routing": "affinity"})
        assert affine.ok and affine.changed(GATEWAY) > 0, affine.output[-4000:]
        assert "balance hash var(txn.affinity)" in on_host(GATEWAY, f"cat {CONFIG}")
        kept = conversations(inventory, tmp_path / "affinity", GATEWAY)
    finally:
        back = run_playbook("playbooks/gateway.yml", INVENTORY)
        assert back.ok, back.output[-4000:]
    alone = conversations(inventory, tmp_path / "alone")
    rates = {name: s["fleet_prefix_cache"]["hit_rate"]
             for name, s in (("least", least), ("affinity", kept), ("alone", alone))}  # fmt: skip
    print(f"prefix-cache hit rates: {rates}")
    assert set(kept["fleet_prefix_cache"]["hosts"]) == set(SERVING)
    assert rates["affinity"] >= 0.9 * rates["alone"], rates
    assert rates["affinity"] > rates["least"] + 0.03, rates


@pytest.mark.parametrize(
    "frontends, says",
    [
        ([{"service": "qwen3-vl", "port": 9000}],
         "gateway_frontends[0].port 9000 is also gateway_stats_port"),
        ([{"service": "qwen3-vl", "port": 9001, "servers": [{"host": "lab2", "port": 8009}]}],
         "gateway_frontends[0].servers[0]: no service qwen3-vl answers on lab2:8009"),
    ],
)  # fmt: skip
def test_a_misconfigured_gateway_is_refused_in_preflight(
    gateway: str, frontends: list[dict], says: str
) -> None:
    before = config_digest()
    run = run_playbook("site.yml", INVENTORY, {"gateway_frontends": frontends}, timeout=1800)
    assert not run.ok and says in run.output, run.output[-4000:]
    assert {h: run.changed(h) for h in (*SERVING, GATEWAY)} == dict.fromkeys((*SERVING, GATEWAY), 0)
    assert config_digest() == before
