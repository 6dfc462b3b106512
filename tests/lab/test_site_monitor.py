"""The monitor (roles/monitor) on a lab host of its own: lab3, in the monitors group (tools/
lab.py up --monitors 1), where no vLLM goes. site.yml deploys Prometheus there and node
exporter with the services' memory on every host, from the lab's own apt repository; a second
run changes nothing; every target is up, by Prometheus's own HTTP API; verify checks each
scrape. Then lab2's vLLM is killed with SIGKILL and kept down: the service-down alert goes
pending, then firing (its `for:` shortened by a variable), and resolves once lab2 serves again.
Run after test_site.py (the served lab)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, lab_cli, on_host, prometheus_api, targets_up, wait

pytestmark = pytest.mark.e2e

MONITOR, SERVING = "lab3", ("lab1", "lab2")
# The alert test's settings: a 5 s scrape, and down for 15 s fires.
FAST = {"monitor_scrape_interval": "5s", "monitor_alert_for": {"down": "15s"}}


@pytest.fixture(scope="module")
def monitor() -> Iterator[str]:
    lab_cli("up", "--hosts", "2", "--monitors", "1")
    try:
        yield MONITOR
    finally:
        lab_cli("down", "--host", MONITOR)


def test_site_deploys_the_monitor_and_every_target_is_up(monitor: str) -> None:
    preview = run_playbook("playbooks/monitor.yml", INVENTORY, check=True, diff=True)
    assert preview.ok, preview.output[-4000:]  # on the bare monitor host
    first = run_playbook("site.yml", INVENTORY, timeout=3000)
    assert first.ok, first.output[-6000:]
    assert first.changed(MONITOR) > 0
    second = run_playbook("site.yml", INVENTORY, timeout=3000)
    assert second.ok, second.output[-6000:]
    hosts = (*SERVING, MONITOR)
    assert {h: second.changed(h) for h in hosts} == dict.fromkeys(hosts, 0), second.drift()
    assert on_host(MONITOR, "ls /etc/systemd/system | grep -c qwen3-vl || true").strip() == "0"
    expected = {("vllm", h) for h in SERVING} | {("node", h) for h in hosts}
    expected |= {("prometheus", MONITOR)}
    seen = wait(lambda: (t := targets_up()) and set(t) == expected
                and set(t.values()) == {"up"} and t, 90)  # fmt: skip
    assert seen, targets_up()
    memory = prometheus_api("/api/v1/query", query='acceldeploy_service_memory_bytes{source="pss"}')
    by_host = {r["metric"]["host"]: float(r["value"][1]) for r in memory["result"]}
    assert set(by_host) == set(SERVING) and min(by_host.values()) > 100 * 2**20, by_host
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/verify.py"), "-i", str(INVENTORY), "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    checks = json.loads(proc.stdout)["checks"]
    assert proc.returncode == 0, [c for c in checks if c["status"] == "fail"]
    scraped = {c["name"] for c in checks if c["host"] == MONITOR and c["status"] == "pass"}
    assert {f"scrape vllm {h}/qwen3-vl" for h in SERVING} <= scraped, scraped


def test_top_shows_both_services_live_in_tmux(monitor: str) -> None:
    """`acceldeploy top` in a terminal (tmux), as an operator runs it: both services, their
    state and memory from the monitor's Prometheus; its refreshes keep the view live."""
    session = "acceldeploy-top"
    command = (f"env PYTHONPATH={ROOT / 'tools'} {sys.executable} -m acceldeploy.cli top "
               f"-i {INVENTORY} --every 1")  # fmt: skip
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, check=False)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "30", command],
                   check=True)  # fmt: skip
    subprocess.run(["tmux", "resize-window", "-t", session, "-x", "160", "-y", "30"], check=False)

    def screen() -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip

    try:
        ready = wait(lambda: (s := screen()).count("serving") == 2 and "(" in s and s, 60)
        assert ready, screen()
        first = ready
        again = wait(lambda: (s := screen()) != first and s, 10)  # the clock in its title moves
        assert again, first
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, check=False)
    print(again)
    rows = [line for line in again.splitlines() if "qwen3-vl" in line]
    assert {line.split()[0] for line in rows} == {f"{h}/qwen3-vl" for h in SERVING}, again
    assert all("MiB" in line or "GiB" in line for line in rows), again  # memory, from the unit


def test_every_dashboard_query_returns_the_labs_series(monitor: str) -> None:
    """The Grafana dashboards' queries (monitor/dashboards.py) on the lab's real Prometheus: each
    parses and, but for the alerts' (none fires on a healthy lab), returns data for both
    services. The recording rules' series need a few evaluations: waited for."""
    from acceldeploy.monitor import dashboards, rules

    missing: list[str] = []
    for name, board in dashboards.build(rules.settings({})).items():
        for query in dashboards.panel_queries(board):
            if "ALERTS" in query:
                prometheus_api("/api/v1/query", query=query)  # parses
            elif not wait(
                lambda q=query: prometheus_api("/api/v1/query", query=q)["result"], 90, 5
            ):
                missing.append(f"{name}: {query}")
    assert not missing, missing


def report_shows_the_kill_and_the_recovery(tmp_path: Path, killed_wall: float) -> None:
    """`acceldeploy report` over the last minutes, through its SSH tunnel to lab3: lab2's `up`
    reads 0 after the kill and 1 again at the end (the PNG shades the span), lab1's never
    drops."""
    proc = subprocess.run(
        [sys.executable, "-m", "acceldeploy.cli", "report", "-i", str(INVENTORY), "--since",
         "5m", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "tools")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = (p for p in tmp_path.iterdir() if p.is_dir())
    assert (run / "up.png").stat().st_size > 10_000 and (run / "index.html").is_file()
    up = {
        s["host"]: s["points"]
        for s in json.loads((run / "series.json").read_text())["figures"]["up"]
    }
    after = [v for t, v in up["lab2"] if t > killed_wall]
    assert 0 in after and after[-1] == 1, up["lab2"]
    assert {v for _, v in up["lab1"]} == {1}, up["lab1"]
    print(f"report: {run / 'up.png'}")


def alert_state(name: str, host: str) -> str:
    for alert in prometheus_api("/api/v1/alerts")["alerts"]:
        labels = alert["labels"]
        if labels.get("alertname") == name and labels.get("host") == host:
            return str(alert["state"])
    return "inactive"


def test_a_killed_service_fires_the_down_alert_which_resolves(monitor: str, tmp_path: Path) -> None:
    fast = run_playbook("site.yml", INVENTORY, FAST, timeout=3000)
    assert fast.ok, fast.output[-4000:]
    assert wait(lambda: set(targets_up().values()) == {"up"}, 60)
    pid = on_host("lab2", "systemctl show -p MainPID --value qwen3-vl").strip()
    killed = time.monotonic()
    # SIGKILL, then no restart: the unit is stopped while its process is already gone
    on_host("lab2", f"kill -9 {pid}; systemctl stop qwen3-vl")
    pending = wait(lambda: alert_state("VllmServiceDown", "lab2") == "pending", 60, 0.5)
    pending_at = time.monotonic()
    firing = wait(lambda: alert_state("VllmServiceDown", "lab2") == "firing", 90, 0.5)
    firing_at = time.monotonic()
    assert pending and firing, prometheus_api("/api/v1/alerts")
    on_host("lab2", "systemctl start qwen3-vl")
    resolved = wait(lambda: alert_state("VllmServiceDown", "lab2") == "inactive", 180, 1.0)
    resolved_at = time.monotonic()
    assert resolved, prometheus_api("/api/v1/alerts")
    assert alert_state("VllmServiceDown", "lab1") == "inactive"  # lab1 served throughout
    print(f"kill -> pending {pending_at - killed:.1f} s, -> firing {firing_at - killed:.1f} s "
          f"(scrape 5 s, for: 15s); start -> resolved {resolved_at - firing_at:.1f} s")  # fmt: skip
    report_shows_the_kill_and_the_recovery(
        tmp_path, killed_wall=time.time() - (time.monotonic() - killed)
    )
    back = run_playbook("site.yml", INVENTORY, timeout=3000)  # the default settings again
    assert back.ok, back.output[-4000:]
