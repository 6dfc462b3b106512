"""The readiness gate on the isolated lab (make test-slow): lab1 and lab2 each in its own network
namespace on the lab bridge (tools/lab.py up --isolated), the gate planned for inventory/lab-dp's
group with the hosts' bridge addresses and NIC (`host0`). Each node's real module passes; then
an nftables drop on the bridge of lab2's packets to the head's data-parallel RPC port, and
lab2's gate refuses, naming the head, its address and port, while lab1's still passes. The
whole group's refusal in a real rollout is tests/lab/test_dp_group_lab.py. The shared-network
lab is back at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import PlaybookRun, lab_inventory, run_playbook
from labhost import ROOT, lab_cli, nft_drop

from acceldeploy.serving import hostplan

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ADDRESS = {"lab1": "10.213.0.11", "lab2": "10.213.0.12"}
NIC = "host0"  # the container's end of its veth on the lab bridge (systemd-nspawn)


@pytest.fixture(scope="module")
def isolated() -> Iterator[None]:
    lab_cli("down")
    lab_cli("up", "--isolated", "--hosts", "2")
    try:
        yield
    finally:
        lab_cli("down")
        lab_cli("up", "--hosts", "2")


def gates() -> dict[str, dict[str, Any]]:
    """Each node's gate, planned from inventory/lab-dp's group on the bridge addresses."""
    shared = yaml.safe_load((ROOT / "inventory/lab-dp/group_vars/all.yml").read_text())
    shared["acceldeploy_services"][0]["network_interface"] = NIC
    every = hostplan.with_node_ips({
        host: {**shared, "acceldeploy_platform": "cpu", "inventory_hostname": host,
               "acceldeploy_node_ip": address}
        for host, address in ADDRESS.items()
    })  # fmt: skip
    return {
        host: {**unit.readiness, "restarting": True}
        for host, hostvars in every.items()
        for unit in hostplan.plan_host(hostvars)
        if unit.readiness
    }


def run_gates(tmp_path: Path) -> PlaybookRun:
    tasks = [{"name": "The gate", "acceldeploy.fleet.acceldeploy_group_gate": {
        "gate": "{{ gates[inventory_hostname] }}"}}]  # fmt: skip
    play = [{"name": "gate", "hosts": "lab1,lab2", "gather_facts": False,
             "vars": {"gates": gates()}, "tasks": tasks}]  # fmt: skip
    path = tmp_path / "gate.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return run_playbook(path, lab_inventory(), timeout=120)


def test_the_gate_passes_and_refuses_a_dropped_path_on_the_bridge(
    isolated: None, tmp_path: Path
) -> None:
    port = gates()["lab1"]["free_ports"][0]["port"]
    open_run = run_gates(tmp_path)
    assert open_run.ok, open_run.output[-4000:]
    assert all(r["gated"] for r in open_run.results("The gate").values())

    head = ADDRESS["lab1"]
    match = f"ip saddr {ADDRESS['lab2']} ip daddr {head} tcp dport {port}"
    with nft_drop(match, family="bridge", hook="forward"):
        dropped = run_gates(tmp_path)
    results = dropped.results("The gate")
    assert dropped.failed("lab2") == 1 and dropped.failed("lab1") == 0, dropped.output[-4000:]
    refusals = results["lab2"]["refusals"]
    assert len(refusals) == 1, refusals
    assert f"lab2: cannot reach lab1 at {head}:{port}" in refusals[0], refusals
    assert "a firewall drops it" in refusals[0] and f"on {NIC}" in refusals[0], refusals
