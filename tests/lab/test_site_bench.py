"""tools/bench.py on the served lab (after test_site.py's site.yml), with real vLLM 0.12.0:
the smoke profile on every service writes a run directory whose summary validates, whose
plots are real images and whose verdict is "bounded"; image_reuse gets multimodal cache hits
where random-mm gets none; a service redeployed with max-num-seqs 1 and a middleware that
keeps 4 MiB per request is judged "growing", is refused as a baseline of another argv, and
regresses against the healthy run; bad input fails before any request."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible_run import as_at_a_terminal, run_playbook
from labhost import INVENTORY, ROOT, on_host

pytestmark = pytest.mark.e2e

HOSTS = ("lab1", "lab2")
SCHEMA = json.loads((ROOT / "schemas/bench-summary.schema.json").read_text())
LEAK_DIR = "/opt/acceldeploy-leak"
LAB_TOLERANCE = ("--tolerance", "0.35")
# A real leak inside the real vLLM API server: vLLM's --middleware loads it.
# Keeps 4 MiB per chat, and answers each 300 ms late: a setup slower beyond the lab's noise
# on any run (max-num-seqs 1 alone was not: the lab's tiny model prefills one at a time anyway).
LEAK = """
import asyncio

KEPT = []

async def keep(request, call_next):
    if request.url.path.endswith("/chat/completions"):
        KEPT.append(bytearray(b"x" * (4 << 20)))
        await asyncio.sleep(1.0)
    return await call_next(request)
"""


def bench(*args: str, out: Path, inventory: Path = INVENTORY) -> tuple[int, str, Path | None]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench.py"), "-i", str(inventory), "--serial",
         "--out", str(out), *args],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, (runs[-1] if runs else None)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    serve = run_playbook("playbooks/serve.yml", INVENTORY, timeout=1800)  # serving, as site left it
    assert serve.ok, serve.output[-3000:]
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="module")
def smoke(out) -> Path:
    code, output, run = bench("--profile", "smoke", out=out / "smoke")
    assert code == 0, output[-6000:]
    assert run is not None
    return run


def test_smoke_on_every_service_is_bounded_with_numbers_in_every_phase(smoke):
    summary = json.loads((smoke / "summary.json").read_text())
    jsonschema.validate(summary, SCHEMA)
    assert [(s["host"], s["service"]) for s in summary["services"]] == [
        (h, "qwen3-vl") for h in HOSTS
    ]
    for s in summary["services"]:
        assert s["verdict"]["state"] == "bounded", s["verdict"]
        (point,) = s["points"]
        assert len(point["runs"]) == 3 and all(r["completed"] == 30 for r in point["runs"])
        assert point["median"]["request_throughput"] > 0
        (device,) = s["memory"]["devices"].values()
        for phase in ("ready", *(f"after round {i} @ inf" for i in (1, 2, 3)),
                      "after reset_mm_cache", "after reset_prefix_cache"):  # fmt: skip
            assert phase in device["phases"] and device["phases"][phase] > 100, (phase, device)
        assert s["metrics"]["scraped"] and s["metrics"]["kv_cache_usage_max"] is not None
        assert s["dev_mode"] and s["verdict"]["reset_endpoints"] == "used"
        where = smoke / s["host"] / s["service"]
        for name in ("memory.csv", "metrics.csv", "samples.jsonl", "vllm-bench.log"):
            assert (where / name).stat().st_size > 0, name
        # vLLM's own result JSONs, in the layout `vllm bench sweep plot` reads
        runs = sorted((where / "BENCH-request_rate=inf").glob("run=*.json"))
        assert len(runs) == 3 and "request_throughput" in json.loads(runs[0].read_text())
        assert len(json.loads((where / "BENCH-request_rate=inf/summary.json").read_text())) == 3
        for png in ("memory.png", "metrics.png", "throughput-latency.png"):
            assert_real_plot(where / png)
    assert (smoke / "report.html").read_text().count("data:image/png;base64,") == 6


def assert_real_plot(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG" and image.width >= 600 and image.height >= 300
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 20, f"{path}: too few colours for a plot"


def hit_rate(run: Path) -> float:
    (s,) = json.loads((run / "summary.json").read_text())["services"]
    return s["metrics"]["rounds"][0]["mm_cache_hit_rate"]


def test_image_reuse_hits_the_mm_cache_where_random_mm_does_not(out):
    code, output, reuse = bench("--profile", "image_reuse", "--limit", "lab1", out=out / "reuse")
    assert code == 0 and reuse is not None, output[-4000:]
    code, output, fresh = bench("--profile", "random-mm", "--limit", "lab1", out=out / "fresh")
    assert code == 0 and fresh is not None, output[-4000:]
    assert hit_rate(reuse) > 0 and hit_rate(fresh) == 0, (hit_rate(reuse), hit_rate(fresh))


def with_profiles(tmp: Path, bench_profiles: dict) -> Path:
    """A copy of the lab inventory (group_vars too) with these acceldeploy_bench_profiles."""
    shutil.copytree(INVENTORY.parent / "group_vars", tmp / "group_vars")
    hosts = yaml.safe_load(INVENTORY.read_text())
    hosts["all"]["vars"] = {**hosts["all"].get("vars", {}),
                            "acceldeploy_bench_profiles": bench_profiles}  # fmt: skip
    (tmp / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return tmp / "hosts.yml"


def as_rate(value: str | float) -> str | float:
    return value if value == "inf" else float(value)


def test_rate_sweep_reports_the_highest_rate_that_met_the_sla(out, tmp_path):
    probe = {"dataset": "images", "prompts": 12, "output_len": 8, "rounds": 1,
             "sla": {"p99_ttft": "150ms"},
             "sweep": {"start_rate": 2, "max_rate": 8, "bisect_steps": 1}}  # fmt: skip
    inventory = with_profiles(tmp_path, {"sla_probe": probe})
    code, output, run = bench("--profile", "sla_probe", "--limit", "lab1", out=out / "sla",
                              inventory=inventory)  # fmt: skip
    assert code == 0 and run is not None, output[-4000:]
    (s,) = json.loads((run / "summary.json").read_text())["services"]
    sla = s["sla"]
    assert sla["limits_ms"] == {"p99_ttft": 150.0} and sla["tried"][0][0] == "inf"
    met = [rate for rate, ok in sla["tried"] if ok]
    numeric = [r for r in met if r != "inf"]
    assert sla["best_rate"] == ("inf" if "inf" in met else max(numeric) if numeric else None)
    assert len(s["points"]) == len({str(r) for r, _ in sla["tried"]})
    # each point is vLLM's own result, and met/missed agrees with its p99 TTFT
    for point in s["points"]:
        (result,) = point["runs"]
        ok = {as_rate(r): m for r, m in sla["tried"]}[as_rate(point["rate"])]
        assert ok == (result["p99_ttft_ms"] <= 150.0 and result["failed"] == 0), point
    assert "lab1/qwen3-vl: highest rate meeting p99_ttft <= 150 ms:" in output


def drivers_running(host: str) -> bool:
    return on_host(host, "pgrep -f '/[d]river.py' || true").strip() != ""


def test_ctrl_c_stops_every_hosts_driver_at_once(out, tmp_path):
    """Both hosts in parallel; Ctrl-C while both drivers run ends bench.py with 130 within
    seconds (not when the runs end), with no driver and no run directory left on a host."""
    slow = {"dataset": "images", "prompts": 200, "output_len": 16, "request_rate": 0.5}
    inventory = with_profiles(tmp_path, {"slow": slow})
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools/bench.py"), "-i", str(inventory), "--profile", "slow",
         "--out", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, preexec_fn=as_at_a_terminal,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not all(drivers_running(h) for h in HOSTS):
            assert proc.poll() is None and time.monotonic() < deadline, "drivers never ran"
            time.sleep(1)
        time.sleep(5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in output, output[-3000:]
    assert took < 30, f"{took:.0f} s from Ctrl-C to exit"
    for host in HOSTS:
        assert not drivers_running(host)
        assert on_host(host, "ls /var/tmp/acceldeploy-bench 2>/dev/null || true").strip() == ""
        on_host(host, f"curl -sf http://127.0.0.1:800{host[-1]}/health")


def test_bad_input_fails_before_any_request(out, tmp_path):
    images = {"dataset": "images", "prompts": 3}
    inventory = with_profiles(
        tmp_path,
        {
            "rate": {**images, "request_rate": 0},
            "units": {**images, "sla": {"p99_ttft": "3min"}},
            "reuse": {**images, "image_reuse": 1.5},
            "file": {"dataset": "sharegpt", "prompts": 3, "dataset_path": "/no/chats.json"},
        },
    )
    before = on_host(
        "lab1", "journalctl -u qwen3-vl -o cat --no-pager | grep -c 'POST /v1' || true"
    )
    for args, says in (
        (["--profile", "nope"], "unknown bench profile 'nope'"),
        (["--profile", "rate", "-i", str(inventory)], "profiles.rate.request_rate must be > 0"),
        (["--profile", "units", "-i", str(inventory)], "sla.p99_ttft: unknown unit 'min'"),
        (["--profile", "reuse", "-i", str(inventory)], "profiles.reuse.image_reuse must be <= 1"),
        (["--profile", "file", "-i", str(inventory)], "/no/chats.json does not exist"),
        (["--profile", "smoke", "--service", "other"], "--service other: no such service"),
    ):
        code, output, _ = bench(*args, out=tmp_path / "bad")
        assert code == 2 and says in output, output[-2000:]
    after = on_host("lab1", "journalctl -u qwen3-vl -o cat --no-pager | grep -c 'POST /v1' || true")
    assert after == before


def test_leaking_degraded_service_is_growing_refused_as_another_argv_and_regresses(
    smoke, out, tmp_path
):
    on_host(
        "lab1",
        f"install -d -m 0755 {LEAK_DIR} && cat > {LEAK_DIR}/acceldeploy_leak.py <<'EOF'{LEAK}EOF",
    )
    # the healthy service against its own healthy baseline: no regression. The lab's hosts
    # share two cores: its figures move up to ~1/3 between runs (median TPOT 9.6 -> 12.8 ms
    # measured), so both comparisons here allow that; the degraded service is far beyond it.
    code, output, _ = bench("--profile", "smoke", "--limit", "lab1", "--baseline", str(smoke),
                            *LAB_TOLERANCE, out=out / "again")  # fmt: skip
    assert code == 0 and ": regressed (" not in output, output[-3000:]
    group = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    (spec,) = group["acceldeploy_services"]
    degraded = {**spec, "env": {**spec["env"], "PYTHONPATH": LEAK_DIR},
                "extra_args": {"max-num-seqs": 1, "middleware": "acceldeploy_leak.keep"}}  # fmt: skip
    changed = run_playbook("playbooks/serve.yml", INVENTORY, {"acceldeploy_services": [degraded]},
                           limit="lab1", timeout=1800)  # fmt: skip
    try:
        assert changed.ok, changed.output[-4000:]
        code, output, run = bench("--profile", "smoke", "--limit", "lab1", "--baseline", str(smoke),
                                  out=out / "degraded")  # fmt: skip
        assert code == 2 and "another setup" in output and "--max-num-seqs" in output, output
        code, output, run = bench("--profile", "smoke", "--limit", "lab1", "--baseline", str(smoke),
                                  "--force", *LAB_TOLERANCE, out=out / "degraded")  # fmt: skip
        assert code == 1 and run is not None, output[-4000:]
        assert "lab1/qwen3-vl: growing: process tree (PSS) grew" in output, output[-3000:]
        summary = json.loads((run / "summary.json").read_text())
        (s,) = summary["services"]
        (device,) = s["verdict"]["devices"]
        assert device["per_round_mib"] > 60, device  # 30 requests x 4 MiB per round
        # every chat starts 1 s late: time to first token rises and throughput falls; which
        # of them clears both runs' 90% intervals over three rounds varies by run (with 300 ms
        # none did once, on the 2 shared cores loaded by a unit-suite hunt beside the lab).
        figures = {r["figure"] for r in summary["regressions"]}
        assert figures & {"request_throughput", "median_ttft_ms", "p99_ttft_ms"}, figures
        assert any(f.startswith("kept memory ") for f in figures), summary["regressions"]
        assert "lab1/qwen3-vl: request_throughput " in output and ": regressed (" in output
    finally:
        back = run_playbook("playbooks/serve.yml", INVENTORY, limit="lab1", timeout=1800)
        assert back.ok, back.output[-4000:]
        on_host("lab1", f"rm -rf {LEAK_DIR}")
