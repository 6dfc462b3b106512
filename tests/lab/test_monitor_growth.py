"""Memory growth caught while the fleet serves (make test-slow; issue 38): lab1 runs bench's
leaking service (vLLM's --middleware keeps 4 MiB per chat), lab2 the healthy one, and both
get the same steady load from `acceldeploy bench` (identical rounds at a fixed request rate,
in parallel). With the growth window shortened to 1 minute (and `for:` 2 minutes, longer
than the healthy service's caches take to fill), ServiceMemoryGrowing fires for lab1 and
never for lab2. Then Prometheus's own figures for the lab (series, samples per second, its
memory and disk) are measured and extrapolated to a day and to 8 hosts x 8 services."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, lab_cli, on_host, prometheus_api

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LEAK_DIR = "/opt/acceldeploy-leak"
LEAK = """
KEPT = []

async def keep(request, call_next):
    if request.url.path.endswith("/chat/completions"):
        KEPT.append(bytearray(b"x" * (4 << 20)))
    return await call_next(request)
"""
GROWTH = {"monitor_scrape_interval": "5s", "monitor_memory_interval": 5,
          "monitor_growth_window": "1m", "monitor_alert_for": {"growth": "2m"}}  # fmt: skip
# identical rounds of 30 image chats at 2 requests/s: ~20 s each, ~8 minutes in all
STEADY = {"dataset": "images", "prompts": 30, "output_len": 16, "request_rate": 2,
          "max_concurrency": 4, "rounds": 22, "warmups": 1, "image_reuse": 0.0}  # fmt: skip


def growth_states() -> dict[str, str]:
    alerts = prometheus_api("/api/v1/alerts")["alerts"]
    return {a["labels"]["host"]: a["state"] for a in alerts
            if a["labels"].get("alertname") == "ServiceMemoryGrowing"}  # fmt: skip


def scalar(promql: str) -> float:
    result = prometheus_api("/api/v1/query", query=promql)["result"]
    return float(result[0]["value"][1]) if result else 0.0


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The lab's inventory with the steady bench profile; lab1's service leaking."""
    tmp = tmp_path_factory.mktemp("growth")
    lab_cli("up", "--hosts", "2", "--monitors", "1")
    shutil.copy(INVENTORY, tmp / INVENTORY.name)
    shutil.copytree(INVENTORY.parent / "group_vars", tmp / "group_vars")
    group_file = tmp / "group_vars/all.yml"
    group = yaml.safe_load(group_file.read_text())
    group["acceldeploy_bench_profiles"] = {"steady": STEADY}
    group.update(GROWTH)
    group_file.write_text(yaml.safe_dump(group, sort_keys=False))
    (spec,) = group["acceldeploy_services"]
    leaking = {**spec, "env": {**spec["env"], "PYTHONPATH": LEAK_DIR},
               "extra_args": {"middleware": "acceldeploy_leak.keep"}}  # fmt: skip
    (tmp / "host_vars").mkdir()
    (tmp / "host_vars/lab1.yml").write_text(yaml.safe_dump({"acceldeploy_services": [leaking]}))
    on_host(
        "lab1",
        f"install -d -m 0755 {LEAK_DIR} && cat > {LEAK_DIR}/acceldeploy_leak.py <<'EOF'{LEAK}EOF",
    )
    try:
        yield tmp / INVENTORY.name
    finally:
        on_host("lab1", f"rm -rf {LEAK_DIR}", check=False)
        lab_cli("down", "--host", "lab3")


def test_the_leaking_service_fires_the_growth_alert_and_the_healthy_one_does_not(
    inventory: Path, tmp_path: Path
) -> None:
    site = run_playbook("site.yml", inventory, timeout=3000)
    assert site.ok, site.output[-4000:]
    began = time.monotonic()
    load = subprocess.Popen(
        [sys.executable, str(ROOT / "tools/bench.py"), "-i", str(inventory), "--profile", "steady",
         "--limit", "lab1,lab2", "--out", str(tmp_path / "bench")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: dict[str, dict[str, float]] = {"lab1": {}, "lab2": {}}
    while load.poll() is None:
        for host, state in growth_states().items():
            seen[host].setdefault(state, time.monotonic() - began)
        time.sleep(5)
    output = load.stdout.read() if load.stdout else ""
    load_ended = datetime.now(UTC).isoformat(timespec="seconds")
    assert load.returncode in (0, 1), output[-3000:]  # 1: a service judged growing
    print(f"growth alert, from the load's start: {seen}")
    assert "firing" in seen["lab1"], (seen, output[-3000:])
    assert "firing" not in seen["lab2"], (seen, output[-3000:])
    # bench, over the same rounds, says the same of each (its verdict: growing or bounded)
    (run,) = (p for p in (tmp_path / "bench").iterdir() if p.is_dir())
    summary = json.loads((run / "summary.json").read_text())
    verdicts = {s["host"]: s["verdict"]["state"] for s in summary["services"]}
    assert verdicts == {"lab1": "growing", "lab2": "bounded"}, (verdicts, output[-3000:])
    print(prometheus_figures(time.monotonic() - began))
    # the report up to the load's end says the same, from Prometheus's history (its PNGs: the
    # docs' pictures)
    report = subprocess.run(
        [sys.executable, "-m", "acceldeploy.cli", "report", "-i", str(inventory), "--since",
         f"{int(time.monotonic() - began) // 60 + 2}m", "--until", load_ended,
         "--out", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tools")},
    )  # fmt: skip
    assert report.returncode == 0, report.stdout + report.stderr
    (run,) = (p for p in (tmp_path / "report").iterdir() if p.is_dir())
    growth = json.loads((run / "series.json").read_text())["growth"]
    assert {g["host"]: g["state"] for g in growth} == {"lab1": "growing", "lab2": "bounded"}, growth
    print(f"report: {run}")
    back = run_playbook("playbooks/serve.yml", INVENTORY, limit="lab1", timeout=1800)
    assert back.ok, back.output[-4000:]


def prometheus_figures(seconds: float) -> str:
    """Prometheus's own size on the lab, and scaled: a day at the measured sample rate (at the
    1-2 bytes a sample its storage docs give), and 8 hosts x 8 services from the lab's series
    per host and per service (memory scaled with the series: an upper bound)."""
    series = {job: scalar(f'count({{job="{job}"}})') for job in ("vllm", "node", "prometheus")}
    rate = scalar("rate(prometheus_tsdb_head_samples_appended_total[5m])")
    rss = scalar('process_resident_memory_bytes{job="prometheus"}')
    disk = float(on_host("lab3", "du -sb /var/lib/prometheus | cut -f1"))
    per_service, per_host = series["vllm"] / 2, series["node"] / 3
    lab = sum(series.values())
    fleet = 64 * per_service + 8 * per_host + series["prometheus"]
    per_sample = rate / lab  # samples a second per series
    mib = 2**20
    return (
        f"Prometheus on the lab after {seconds / 60:.0f} min: {lab:.0f} series "
        f"({per_service:.0f} per service, {per_host:.0f} per host), {rate:.0f} samples/s, "
        f"RSS {rss / mib:.0f} MiB, disk {disk / mib:.1f} MiB; a day: "
        f"{rate * 86400 / mib:.0f}-{2 * rate * 86400 / mib:.0f} MiB. 8 hosts x 8 services: "
        f"{fleet:.0f} series, {fleet * per_sample:.0f} samples/s, a day "
        f"{fleet * per_sample * 86400 / mib:.0f}-{2 * fleet * per_sample * 86400 / mib:.0f} MiB, "
        f"RSS <= {rss * fleet / lab / mib:.0f} MiB"
    )
