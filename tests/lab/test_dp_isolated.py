"""Data parallel across the isolated lab (make test-slow): lab1 and lab2 each in its own network
namespace on the lab bridge (tools/lab.py up --isolated), deployed from bare with the offline
bundle (the isolated hosts reach nothing but its server), inventory/lab-dp's group planned on
their bridge addresses and NIC (host0), the head's API server on lab1's bridge address with an
API key. So the ranks talk over a real link between two network stacks, and the link can be
cut:

- requests sent to the head from this machine are served by both ranks (the head's /metrics
  counts each engine's); verify passes; a second run changes nothing;
- the cut link, which is what the head sees of a node's power loss: an nftables drop on the
  bridge of every packet between lab1 and lab2, under a steady load sent to the head. Each
  node's vllm-dp-watch finds its peer silent and ends its server; every request sent before
  the cut (but those in flight when it came) was answered, and every request gets its answer
  or its error within REQUEST_BOUND, none hangs; once the link is back, the group forms again by
  itself within HEAL_BOUND and both ranks serve.

The cut's figures go to $ACCELDEPLOY_CACHE/logs/dp-cut-link.json; docs/operations/multi-node.md
has the measured ones. The shared-network lab is back at the end."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, nft_drop, offline_isolated_lab, on_host, verify_report
from test_gateway_rollout import Load

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CACHE = Path(os.environ.get("ACCELDEPLOY_CACHE") or "/var/cache/acceldeploy")
ADDRESS = {"lab1": "10.213.0.11", "lab2": "10.213.0.12"}
NIC = "host0"  # the container's end of its veth on the lab bridge (systemd-nspawn)
SERVICE, RANK = "qwen3-vl-dp", "dp-qwen3-vl-dp"
KEY = "sk-lab-dp-0123456789abcdef"
BASE = f"http://{ADDRESS['lab1']}:8021"
BETWEEN = "ip saddr { 10.213.0.11, 10.213.0.12 } ip daddr { 10.213.0.11, 10.213.0.12 }"
RATE = 1.0  # chats a second sent to the head
HOLD = 60.0  # seconds the link stays cut
ENDED_BOUND = 60.0  # seconds from the cut until both nodes' watches ended their servers
REQUEST_BOUND = 60.0  # seconds any request may take to get its answer or its error
HEAL_BOUND = 300.0  # seconds from the link's return until the group serves again
STEADY_MARGIN = 5.0  # seconds: a request sent this long before the cut was answered before it
SUCCESS = re.compile(r'^vllm:request_success_total\{engine="(\d+)",([^}]*)\} ([0-9.]+)$', re.M)


def isolated_inventory(tmp: Path) -> Path:
    """inventory/lab-dp on the isolated lab's addresses: each node's bridge address and NIC,
    the head's API on its bridge address with an API key (beyond loopback it needs one)."""
    shutil.copy(INVENTORY, tmp / "hosts.yml")
    shutil.copytree(ROOT / "inventory/lab-dp/group_vars", tmp / "group_vars")
    (tmp / "host_vars").mkdir()
    for host, address in ADDRESS.items():
        (tmp / f"host_vars/{host}.yml").write_text(f"acceldeploy_node_ip: {address}\n")
    group_file = tmp / "group_vars/all.yml"
    group = yaml.safe_load(group_file.read_text())
    (spec,) = group["acceldeploy_services"]
    spec.update(network_interface=NIC, host="{{ ansible_host }}", api_key=KEY)
    for gateway_only in ("gateway_frontends", "gateway_stats_port"):
        group.pop(gateway_only, None)
    group_file.write_text(yaml.safe_dump(group, sort_keys=False))
    return tmp / "hosts.yml"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    bundle = CACHE / "bundles" / "lab-dp"
    tmp = tmp_path_factory.mktemp("dp-isolated")
    with offline_isolated_lab(lambda: isolated_inventory(tmp), bundle, "--hosts", "2") as inventory:
        run = run_playbook("site.yml", inventory, {"acceldeploy_bundle": str(bundle)}, timeout=3600)
        assert run.ok, run.output[-8000:]
        yield inventory, bundle


def chat(content: str) -> dict[str, Any]:
    body = {"model": SERVICE, "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    request = urllib.request.Request(
        f"{BASE}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


def served_by_engine() -> dict[str, float]:
    """{engine index: requests it finished}, from the head's /metrics (outside /v1: no key)."""
    with urllib.request.urlopen(f"{BASE}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    counts: dict[str, float] = {}
    for engine, _, value in SUCCESS.findall(text):
        counts[engine] = counts.get(engine, 0.0) + float(value)
    return counts


def both_engines_serve(n: int) -> dict[str, float]:
    before = served_by_engine()
    for i in range(n):
        assert chat(f"Hello {i}")["choices"][0]["finish_reason"] in ("length", "stop")
    return {e: v - before.get(e, 0.0) for e, v in served_by_engine().items()}


def restarts(host: str, unit: str) -> int:
    return int(on_host(host, f"systemctl show -p NRestarts --value {unit}").strip())


def test_two_ranks_over_the_bridge_serve_verify_passes_and_a_rerun_changes_nothing(
    deployed: tuple[Path, Path],
) -> None:
    inventory, bundle = deployed
    rank_log = on_host("lab2", f"journalctl -u {RANK} -o cat --no-pager")
    assert f"with head node address tcp://{ADDRESS['lab1']}:13389" in rank_log
    done = both_engines_serve(8)
    print(f"\n[dp isolated] requests finished per engine: {done}", flush=True)
    assert sum(done.values()) == 8 and done.get("1", 0) > 0, done
    code, report = verify_report(inventory)
    assert code == 0, [c for c in report["checks"] if c["status"] == "fail"]
    again = run_playbook("site.yml", inventory, {"acceldeploy_bundle": str(bundle)}, timeout=1800)
    assert again.ok, again.output[-4000:]
    assert again.changed("lab1") == 0 and again.changed("lab2") == 0, again.drift()


def test_a_cut_link_ends_both_nodes_no_client_hangs_and_the_group_forms_again(
    deployed: tuple[Path, Path],
) -> None:
    counts = {"lab1": restarts("lab1", SERVICE), "lab2": restarts("lab2", RANK)}
    ended: dict[str, float] = {}
    with Load(RATE, f"{BASE}/v1/chat/completions", SERVICE, KEY) as load:
        time.sleep(10)
        cut = time.monotonic()
        with nft_drop(BETWEEN, family="bridge", hook="forward"):
            while time.monotonic() < cut + HOLD:
                time.sleep(2)
                for host, unit in (("lab1", SERVICE), ("lab2", RANK)):
                    if host not in ended and restarts(host, unit) > counts[host]:
                        ended[host] = time.monotonic() - cut
        back, healed = time.monotonic(), None
        while time.monotonic() < back + HEAL_BOUND + 60:
            time.sleep(1)
            after = [r for r in list(load.records) if r["sent"] >= back]
            failed_at = max((r["sent"] for r in after if r["outcome"] != 200), default=back)
            good = [r for r in after if r["sent"] > failed_at and r["outcome"] == 200]
            if len(good) >= RATE * 15:
                healed = min(r["sent"] for r in good) - back
                break
    records = load.records
    # requests in flight when the link went are lost with it (their step needed the peer);
    # those sent earlier than the slowest normal answer before the cut were all answered
    steady = [r for r in records if r["sent"] < cut - STEADY_MARGIN]
    failed = [r for r in records if r["outcome"] != 200]
    figures = {
        "requests": len(records), "steady_failed": sum(r["outcome"] != 200 for r in steady),
        "failed": len(failed), "ended_s": ended, "healed_after_link_back_s": healed,
        "slowest_request_s": max(r["latency"] for r in records),
        "outcomes": sorted({str(r["outcome"]) for r in failed}),
    }  # fmt: skip
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "dp-cut-link.json").write_text(json.dumps(figures, indent=2))
    print(f"\n[dp cut link] {json.dumps(figures)}", flush=True)
    head_log = on_host("lab1", f"journalctl -u {SERVICE} -o cat --no-pager")
    rank_log = on_host("lab2", f"journalctl -u {RANK} -o cat --no-pager")
    assert f"no answer from the group's node(s) {ADDRESS['lab2']}" in head_log
    assert f"no answer from the group's node(s) {ADDRESS['lab1']}" in rank_log
    assert figures["steady_failed"] == 0, figures
    assert set(ended) == {"lab1", "lab2"} and max(ended.values()) < ENDED_BOUND, figures
    assert figures["slowest_request_s"] < REQUEST_BOUND, figures  # an answer or an error
    assert healed is not None and healed < HEAL_BOUND, figures
    done = both_engines_serve(8)
    assert done.get("1", 0) > 0, f"lab2's rank does not serve after the cut: {done}"
