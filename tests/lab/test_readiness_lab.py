"""The readiness gate's module (acceldeploy_group_gate) on a real lab host: its own `ip`,
/proc and sockets, and a fake `hccn_tool` that prints recorded real output (the link's DOWN
line is the tool's documented format: tests/data/recorded/SOURCES.md), as the fake-device
hosts of test_runtimes_lab.py do. What a refusal says is unit-tested (tests/unit/
test_readiness.py); here the module collects for real and refuses, read-only, in check mode
too. The whole group's gate in a real rollout, with an nftables drop, is
tests/lab/test_dp_group_lab.py (make test-slow)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import PlaybookRun, lab_inventory, run_playbook
from labhost import ROOT, nft_drop, on_host

from acceldeploy.host.readiness import hccn

pytestmark = pytest.mark.lab

HOST = "lab2"
TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
RECORDED = ROOT / "tests/data/recorded"
PEER_NPU = "29.1.137.205"  # the recorded ping's peer
HL_SMI = "/usr/local/bin/hl-smi"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text().split("\n", 1)[1]


def fake_tool() -> str:
    """hccn_tool printing the recordings: device 3's link DOWN, every other device UP."""
    down, up = recorded("hccn-tool-link-g-format.txt").splitlines()[1], "link status: UP"
    health = "net health status: Success"
    return f"""#!/bin/sh
# acceldeploy lab: prints recorded hccn_tool output (tests/data/recorded)
case "$*" in
  "-i 3 -link -g") echo {shlex.quote(down)} ;;
  *"-link -g") echo {shlex.quote(up)} ;;
  *"-net_health -g") echo {shlex.quote(health)} ;;
  *"-ip -g") printf %s {shlex.quote(recorded("hccn-tool-ip-g-910b1.txt"))} ;;
  *"-ping -g address {PEER_NPU}") printf %s {shlex.quote(recorded("hccn-tool-ping-910b1.txt"))} ;;
  *) echo "unknown: $*" >&2; exit 1 ;;
esac
"""


@pytest.fixture(scope="module")
def fake_npus() -> Iterator[None]:
    script = shlex.quote(fake_tool())
    on_host(
        HOST, f"mkdir -p {Path(TOOL).parent} && printf %s {script} > {TOOL} && chmod 0755 {TOOL}"
    )
    try:
        yield
    finally:
        on_host(HOST, "rm -rf /usr/local/Ascend")


@pytest.fixture
def fake_hpus() -> Iterator[None]:
    """hl-smi printing the recorded port-type format, and link states in the published example's
    format with external port 22 DOWN (a derived input: no public capture of one exists)."""
    links = "port  8:        UP\nport 22:        DOWN\nport 23:        UP\n"
    script = f"""#!/bin/sh
# acceldeploy lab: hl-smi in the recorded formats (tests/data/recorded)
case "$*" in
  "-Q module_id,bus_id -f csv,noheader") echo '2, 0000:bb:00.0' ;;
  "-n ports -i 0000:bb:00.0") printf %s {shlex.quote(recorded("hl-smi-n-ports-format.txt"))} ;;
  "-n link -i 0000:bb:00.0") printf {shlex.quote(links)} ;;
  *) echo "unknown: $*" >&2; exit 1 ;;
esac
"""
    on_host(HOST, f"printf %s {shlex.quote(script)} > {HL_SMI} && chmod 0755 {HL_SMI}")
    try:
        yield
    finally:
        on_host(HOST, f"rm -f {HL_SMI}")


def gate(**change: Any) -> dict[str, Any]:
    """A worker's gate that should pass on the lab host: loopback, dials answered."""
    spec = {
        "service": "m", "host": HOST, "address": "127.0.0.22", "address_var": "acceldeploy_node_ip",
        "interface": "lo", "owners": ["dp-m"], "units_by_node": {"lab1": ["m"], HOST: ["dp-m"]},
        "free_ports": [], "npus": [], "restarting": True,
        "dials": [{"peer": "lab1", "address": "127.0.0.1", "port": 2201, "what": "sshd"},
                  {"peer": "lab1", "address": "127.0.0.1", "port": 40961, "what": "ephemeral"}],
    }  # fmt: skip
    return {**spec, **change}


def run_gate(tmp_path: Path, spec: dict[str, Any], check: bool = False, **more: Any) -> PlaybookRun:
    play = [{"name": "gate", "hosts": HOST, "gather_facts": False, "tasks": [
        {"name": "The gate", "acceldeploy.fleet.acceldeploy_group_gate": {"gate": spec, **more}}]}]  # fmt: skip
    path = tmp_path / "gate.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return run_playbook(path, lab_inventory(), timeout=120, args=["--check"] if check else [])


def refusals(run: PlaybookRun) -> list[str]:
    (result,) = run.results("The gate").values()
    return list(result.get("refusals") or [])


def test_a_node_that_can_reach_its_peers_passes(tmp_path: Path) -> None:
    run = run_gate(tmp_path, gate())
    assert run.ok, run.output[-3000:]
    (result,) = run.results("The gate").values()
    assert result["gated"] is True and result["changed"] is False


def test_a_missing_nic_a_held_port_and_a_closed_path_are_refused_in_check_mode(
    tmp_path: Path,
) -> None:
    spec = gate(
        interface="nosuch0",
        free_ports=[{"port": 2202, "what": "the head's data-parallel RPC port", "var": "cluster_port"}],
        dials=[{"peer": "lab1", "address": "127.0.0.99", "port": 13389, "what": "rpc"}],
    )  # fmt: skip
    # The lab hosts share this machine's network namespace: its nftables filter is theirs.
    with nft_drop("ip daddr 127.0.0.99 tcp dport 13389"):
        run = run_gate(tmp_path, spec, check=True)
    assert not run.ok
    found = refusals(run)
    assert any("network_interface nosuch0 does not exist here" in r for r in found), found
    assert any("port 2202" in r and "held by ssh" in r for r in found), found
    assert any("cannot reach lab1 at 127.0.0.99:13389" in r and "firewall drops it" in r
               for r in found), found  # fmt: skip


def test_a_down_npu_link_is_refused_naming_the_device(fake_npus: None, tmp_path: Path) -> None:
    run = run_gate(tmp_path, gate(npus=[0, 3]))
    assert not run.ok
    found = refusals(run)
    assert [r for r in found if "NPU 3: link status DOWN (hccn_tool -i 3 -link -g)" in r], found
    assert not [r for r in found if "NPU 0: link" in r], found
    (result,) = run.results("The gate").values()
    own = hccn.address(recorded("hccn-tool-ip-g-910b1.txt"))[0]
    assert result["npu_addresses"] == {"0": own, "3": own}


def test_each_npu_pings_its_peers_npu(fake_npus: None, tmp_path: Path) -> None:
    run = run_gate(tmp_path, gate(npus=[0]), stage="peers", peer_npus={"lab1": {"0": PEER_NPU}})
    assert run.ok, run.output[-3000:]
    failing = run_gate(tmp_path, gate(npus=[0]), stage="peers",
                       peer_npus={"lab1": {"0": "29.1.0.99"}})  # fmt: skip
    assert not failing.ok and "unknown: -i 0 -ping -g address 29.1.0.99" in json.dumps(
        refusals(failing)
    )


def test_a_down_external_hpu_port_is_refused_naming_the_module(
    fake_hpus: None, tmp_path: Path
) -> None:
    run = run_gate(tmp_path, gate(hpus=["2"]))
    assert not run.ok
    (refusal,) = refusals(run)
    assert refusal.startswith("lab2: HPU module 2 (0000:bb:00.0): external port(s) 22 DOWN")
