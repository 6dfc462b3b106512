"""tools/tune.py on lab1's served qwen3-vl (after test_site.py), with real vLLM 0.12.0: a
grid of max_num_seqs x max_model_len, where the planner refuses the points whose
max_model_len the model cannot take and the others run on the real service; the table has
every point, the winner is the best passing one, the Pareto plot is a real image, --apply
changes only the winner's keys in the vars file, and afterwards the unit file, the launcher
and the running argv are byte-identical and /health answers. Bad input fails before any
restart."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from labhost import INVENTORY, ROOT, on_host

pytestmark = pytest.mark.e2e

HOST = "lab1"
SERVICE = "qwen3-vl"
SPACE = "max_num_seqs=1,4 max_model_len=2048,100000"
SLA = "p99_ttft<=1500ms"
PROFILE = {"dataset": "images", "prompts": 8, "output_len": 8, "rounds": 2,
           "sweep": {"start_rate": 4, "max_rate": 8, "bisect_steps": 0}}  # fmt: skip


def tune(*args: str, inventory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools/tune.py"), "-i", str(inventory), "--host", HOST,
         "--service", SERVICE, "--profile", "tune_probe", *args],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip


def fingerprint() -> str:
    return on_host(
        HOST,
        f"sha256sum /etc/systemd/system/{SERVICE}.service /usr/local/libexec/acceldeploy/"
        f"{SERVICE}.launch; tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value {SERVICE})"
        "/cmdline",
    )


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("tune-inventory")
    shutil.copytree(INVENTORY.parent / "group_vars", tmp / "group_vars")
    hosts = yaml.safe_load(INVENTORY.read_text())
    hosts["all"]["vars"] = {**hosts["all"].get("vars", {}),
                            "acceldeploy_bench_profiles": {"tune_probe": PROFILE}}  # fmt: skip
    (tmp / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return tmp / "hosts.yml"


def test_bad_input_fails_before_any_restart(inventory):
    pid = on_host(HOST, f"systemctl show -p MainPID --value {SERVICE}")
    for args, says in (
        (["--space", "colour=1,2", "--sla", SLA], "--space colour: unknown axis"),
        (["--space", "max_num_seqs=four", "--sla", SLA], "'four' is not a whole number"),
        (["--space", "max_num_seqs=1", "--sla", "p99_ttft<=3min"], "unknown unit 'min'"),
        (["--space", "", "--sla", SLA], "--space is empty"),
    ):
        proc = tune(*args, inventory=inventory)
        assert proc.returncode == 2 and says in proc.stderr, proc.stdout + proc.stderr
    assert on_host(HOST, f"systemctl show -p MainPID --value {SERVICE}") == pid


def test_grid_on_the_real_service_leaves_it_as_it_was(inventory, tmp_path):
    before = fingerprint()
    vars_file = inventory.parent / "group_vars/all.yml"
    original = vars_file.read_text()
    proc = tune("--space", SPACE, "--sla", SLA, "--headroom-mib", "512", "--out",
                str(tmp_path), "--apply", inventory=inventory)  # fmt: skip
    print(proc.stdout[-4000:])
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    state = json.loads((run / "tune.json").read_text())
    rows = {r["label"]: r for r in state["points"]}
    assert len(rows) == 4
    refused = [r for r in rows.values() if r["point"]["max_model_len"] == 100000]
    assert all(r["status"] == "does not fit" and "max_model_len" in r["reason"] for r in refused)
    measured = [r for r in rows.values() if r["point"]["max_model_len"] == 2048]
    assert all(r["status"] in ("measured", "pruned") for r in measured), measured
    for r in (r for r in measured if r["status"] == "measured"):
        assert r["ready_seconds"] > 0 and r["memory_ready_mib"] > 100 and r["peak_mib"] > 100
        assert r["verdict"] in ("bounded", "growing"), r  # rounds ran at the rate found
        assert r["passes"] == (r["best_rate"] is not None and not r["why_not"])
    passing = [r for r in measured if r.get("passes")]
    if passing:
        assert proc.returncode == 0, proc.stderr[-3000:]
        best = max(passing, key=lambda r: (r["throughput"], -r["peak_mib"]))
        assert state["winner"] == best["label"]
        snippet = yaml.safe_load((run / "winner.yml").read_text())
        (entry,) = snippet["acceldeploy_services"]
        assert entry["extra_args"]["max-num-seqs"] == best["point"]["max_num_seqs"]
        # --apply: the winner's keys, and nothing else, in the file that defines the services
        (applied,) = yaml.safe_load(vars_file.read_text())["acceldeploy_services"]
        (was,) = yaml.safe_load(original)["acceldeploy_services"]
        assert applied == {**was, "extra_args": {"max-num-seqs": best["point"]["max_num_seqs"]},
                           "max_model_len": 2048}  # fmt: skip
        assert "--- " in proc.stdout and "+      max-num-seqs:" in proc.stdout
    else:
        assert proc.returncode == 1 and state["winner"] is None
        assert vars_file.read_text() == original
    from PIL import Image

    with Image.open(run / "pareto.png") as image:
        assert image.format == "PNG" and image.width >= 600
    assert state["restored"]["healthy"] and state["restored"]["identical"], state["restored"]
    assert fingerprint() == before
    assert on_host(HOST, f"systemctl show -p DropInPaths --value {SERVICE}").strip() == ""
    on_host(HOST, "curl -sf http://127.0.0.1:8001/health")
