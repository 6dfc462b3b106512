"""One model split over the two lab hosts by vLLM's own multiprocessing (backend nnodes,
inventory/lab-split) on cpu-vllm-0.32.0, the stack that can (versions/stacks.yml nnodes_split):
TP 2, rank 0 with the API server on lab1, rank 1 in `node-qwen3-vl-tp` on lab2, headless.
site.yml deploys it after the group's readiness gate; a chat through lab1's API server needs
both ranks for every token (tensor parallel), and lab2's journal shows its worker; a second run
changes nothing; verify passes. Builds (or reuses) the 0.32.0 environment on both hosts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ansible_run import run_playbook
from labhost import ROOT, on_host, verify_report
from vllm_client import chat

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INVENTORY = ROOT / "inventory/lab-split"
SERVICE = "qwen3-vl-tp"
NODE = f"node-{SERVICE}"
BASE = "http://127.0.0.1:8031"


@pytest.fixture(scope="module")
def deployed() -> Iterator[None]:
    run = run_playbook("site.yml", INVENTORY, timeout=3600)
    assert run.ok, run.output[-8000:]
    yield


def test_one_model_split_over_two_hosts_answers(deployed: None) -> None:
    assert on_host("lab1", f"systemctl is-active {SERVICE}").strip() == "active"
    assert on_host("lab2", f"systemctl is-active {NODE}").strip() == "active"
    assert '"0.32.0"' in on_host("lab1", f"curl -sf {BASE}/version")
    for n in range(4):
        reply = chat(BASE, SERVICE, f"Hello {n}", max_tokens=4)
        assert reply["choices"][0]["finish_reason"] in ("length", "stop")
    node_log = on_host("lab2", f"journalctl -u {NODE} -o cat --no-pager")
    assert "Worker_TP1" in node_log, node_log[-3000:]
    head_log = on_host("lab1", f"journalctl -u {SERVICE} -o cat --no-pager")
    assert "world_size=2" in head_log and "local_world_size=1" in head_log, head_log[-3000:]


def test_a_rerun_changes_nothing_and_verify_passes(deployed: None) -> None:
    second = run_playbook("site.yml", INVENTORY, timeout=1200)
    assert second.ok, second.output[-6000:]
    assert second.changed("lab1") == 0 and second.changed("lab2") == 0, second.output[-6000:]
    code, report = verify_report(INVENTORY)
    assert code == 0, [c for c in report["checks"] if c["status"] == "fail"]
    node = {c["name"]: c["status"] for c in report["checks"]
            if c["host"] == "lab2" and c["service"] == NODE}  # fmt: skip
    assert node.get("unit") == "pass" and node.get("journal") == "pass", node
