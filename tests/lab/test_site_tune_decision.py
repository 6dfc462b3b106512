"""Both sides of tune's decision on lab1's real vLLM (issue 40's acceptance), with the service
deployed on max-num-seqs 1 for the module:

- a clear winner: max_num_seqs=8 against the deployed 1 under 8 concurrent requests, three
  tunes, the second while lab2 runs a steady CPU load; 8 wins all three, with its interval;
- no winner: an A/A space (max_num_seqs=1 spelled out against the deployed 1), three tunes,
  each saying "no point beats the deployed flags beyond the noise"; --apply refuses and leaves
  the vars file as it was.

The tables are printed (-s) for docs/operations/tune.md."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, on_host

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HOST, LOADED = "lab1", "lab2"
SERVICE = "qwen3-vl"
NO_WINNER = "no point beats the deployed flags beyond the noise"
# 8 requests at once, each decoding 128 tokens: with 8 sequences they decode together, with 1
# one after another. The SLA is loose so that every run of both meets it at unlimited rate.
PROFILE = {"dataset": "random", "input_len": 64, "output_len": 128, "ignore_eos": True,
           "prompts": 8, "max_concurrency": 8, "rounds": 2, "warmups": 1,
           "sweep": {"start_rate": 1, "max_rate": 2, "bisect_steps": 0}}  # fmt: skip
SLA = "p99_ttft<=60s"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> Iterator[Path]:
    """The lab's inventory with the service on max-num-seqs 1 and the probe profile; deployed
    for the module, the lab's own put back after it."""
    tmp = tmp_path_factory.mktemp("tune-decision")
    shutil.copytree(INVENTORY.parent / "group_vars", tmp / "group_vars")
    vars_file = tmp / "group_vars/all.yml"
    group = yaml.safe_load(vars_file.read_text())
    (spec,) = group["acceldeploy_services"]
    spec["extra_args"] = {**(spec.get("extra_args") or {}), "max-num-seqs": 1}
    vars_file.write_text(yaml.safe_dump(group, sort_keys=False))
    hosts = yaml.safe_load(INVENTORY.read_text())
    hosts["all"]["vars"] = {**hosts["all"].get("vars", {}),
                            "acceldeploy_bench_profiles": {"decision": PROFILE}}  # fmt: skip
    (tmp / "hosts.yml").write_text(yaml.safe_dump(hosts))
    served = run_playbook("playbooks/serve.yml", tmp / "hosts.yml", limit=HOST, timeout=1800)
    assert served.ok, served.output[-4000:]
    try:
        yield tmp / "hosts.yml"
    finally:
        back = run_playbook("playbooks/serve.yml", INVENTORY, limit=HOST, timeout=1800)
        assert back.ok, back.output[-4000:]


def tune(inventory: Path, out: Path, space: str, *args: str) -> tuple[int, str, dict]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/tune.py"), "-i", str(inventory), "--host", HOST,
         "--service", SERVICE, "--profile", "decision", "--space", space, "--sla", SLA,
         "--headroom-mib", "256", "--out", str(out), *args],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    print(proc.stdout[-6000:])
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return proc.returncode, proc.stdout + proc.stderr, json.loads((run / "tune.json").read_text())


def steady_load(host: str) -> None:
    on_host(host, "systemd-run --unit=acceldeploy-test-load --collect "
                  "sh -c 'while :; do :; done'")  # fmt: skip


def test_a_clear_winner_wins_all_three_tunes_once_under_load(inventory, tmp_path):
    for i in range(3):
        if i == 1:
            steady_load(LOADED)
        try:
            code, output, state = tune(inventory, tmp_path / str(i), "max_num_seqs=8")
        finally:
            if i == 1:
                on_host(LOADED, "systemctl stop acceldeploy-test-load", check=False)
        assert code == 0, output[-4000:]
        rows = {r["label"]: r for r in state["points"]}
        best = rows["max_num_seqs=8"]
        assert state["winner"] == "max_num_seqs=8", state["decision"]
        assert best["runs"] == 3 and best["beats"] == "throughput"
        assert best["gain_sla_throughput"]["low"] > 0
        assert "winner: max_num_seqs=8: beats the deployed flags by +" in output
        assert state["restored"]["healthy"] and state["restored"]["identical"]


def test_an_a_a_space_has_no_winner_three_times_and_apply_refuses(inventory, tmp_path):
    vars_file = inventory.parent / "group_vars/all.yml"
    before = vars_file.read_text()
    for i in range(3):
        code, output, state = tune(inventory, tmp_path / str(i), "max_num_seqs=1", "--apply")
        assert code == 1 and state["winner"] is None, output[-4000:]
        assert f"winner: none: {NO_WINNER}" in output
        assert f"--apply refused: {NO_WINNER}" in output
        assert vars_file.read_text() == before
        (same,) = [r for r in state["points"] if not r["deployed"]]
        assert same["runs"] == 3 and same["passes"] and same["beats"] is None
        # Not beating the deployed flags is the decision: its gain's interval is not wholly
        # above 0. (That the 90% interval also holds 0 is not asserted: for the same flags it
        # misses 0 on either side one tune in ten, by construction.)
        gain = same["gain_sla_throughput"]
        assert not gain["low"] > 0, gain
        assert state["restored"]["healthy"] and state["restored"]["identical"]
