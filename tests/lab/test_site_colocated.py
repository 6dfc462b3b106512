"""A fleet of two servers with no third machine: lab1 is also the gateway and lab2 also the
monitor (acceldeploy_serves: true on each, docs/operations/gateway.md#a-fleet-of-two-servers-
where-the-gateway-goes). On the served lab, site.yml under --check --diff changes nothing;
then it adds HAProxy on lab1 and Prometheus on lab2 beside their vLLM, which keeps serving
(the same process); a second run changes nothing; requests through lab1's endpoint reach both
hosts; Prometheus on lab2 scrapes both; verify passes. Afterwards HAProxy and Prometheus are
stopped and their records dropped, so the lab is the served two-host lab again. Runs after
test_site.py (the served lab) and before test_site_gateway.py (its lab3 takes the same
frontend port)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, haproxy_servers, on_host, targets_up, verify_report, wait
from vllm_client import chat

pytestmark = pytest.mark.e2e

GATEWAY, MONITOR = "lab1", "lab2"
SERVING = (GATEWAY, MONITOR)
ENDPOINT = "http://127.0.0.1:9001"  # the lab's gateway_frontends; the lab shares one network
MAIN_PID = "systemctl show --property=MainPID --value qwen3-vl"


@pytest.fixture(scope="module")
def colocated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The lab's inventory with lab1 in gateways and lab2 in monitors, both still serving."""
    where = tmp_path_factory.mktemp("colocated")
    shutil.copytree(INVENTORY.parent / "group_vars", where / "group_vars")
    hosts = yaml.safe_load(INVENTORY.read_text())
    children = hosts["all"]["children"]
    assert set(children) == {"lab"}, "run on the served two-host lab, without lab3 or lab4"
    children["gateways"] = {"hosts": {GATEWAY: {"acceldeploy_serves": True}}}
    children["monitors"] = {"hosts": {MONITOR: {"acceldeploy_serves": True}}}
    inventory = where / "hosts.yml"
    inventory.write_text(yaml.safe_dump(hosts, sort_keys=False))
    served = run_playbook("site.yml", INVENTORY, timeout=1800)  # a no-op on the served lab
    assert served.ok, served.output[-6000:]
    try:
        yield inventory
    finally:
        on_host(GATEWAY, "systemctl disable --now haproxy; rm -f /var/lib/acceldeploy/state/"
                         "gateway.json", check=False)  # fmt: skip
        on_host(MONITOR, "systemctl disable --now prometheus; rm -f /var/lib/acceldeploy/state/"
                         "monitor.json", check=False)  # fmt: skip


def test_two_servers_serve_with_the_gateway_and_the_monitor_on_them(colocated: Path) -> None:
    pids = {h: on_host(h, MAIN_PID).strip() for h in SERVING}
    assert all(pid != "0" for pid in pids.values()), pids
    preview = run_playbook("site.yml", colocated, check=True, diff=True, timeout=1800)
    assert preview.ok, preview.output[-6000:]
    first = run_playbook("site.yml", colocated, timeout=1800)
    assert first.ok, first.output[-6000:]
    assert first.changed(GATEWAY) > 0 and first.changed(MONITOR) > 0
    second = run_playbook("site.yml", colocated, timeout=1800)
    assert second.ok, second.output[-6000:]
    assert {h: second.changed(h) for h in SERVING} == dict.fromkeys(SERVING, 0), second.drift()
    # vLLM kept serving beside HAProxy and Prometheus: the same process on each host.
    assert {h: on_host(h, MAIN_PID).strip() for h in SERVING} == pids

    before = {s: int(row["stot"]) for s, row in haproxy_servers(GATEWAY, "qwen3-vl").items()}
    assert set(SERVING) <= set(before), before
    for _ in range(8):
        chat(ENDPOINT, "qwen3-vl", "Hello", max_tokens=4)
    after = {s: int(row["stot"]) for s, row in haproxy_servers(GATEWAY, "qwen3-vl").items()}
    assert all(after[h] > before[h] for h in SERVING), (before, after)

    expected = {("vllm", h) for h in SERVING} | {("node", h) for h in SERVING}
    expected |= {("prometheus", MONITOR)}
    seen = wait(lambda: (t := targets_up()) and set(t) == expected
                and set(t.values()) == {"up"} and t, 90)  # fmt: skip
    assert seen, targets_up()

    code, report = verify_report(colocated)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert code == 0, failed
    passed = {(c["host"], c["name"]) for c in report["checks"] if c["status"] == "pass"}
    assert {(MONITOR, f"scrape vllm {h}/qwen3-vl") for h in SERVING} <= passed, passed
    assert {(GATEWAY, f"backend {h}") for h in SERVING} <= passed, passed
    assert {(h, "health") for h in SERVING} <= passed, passed
