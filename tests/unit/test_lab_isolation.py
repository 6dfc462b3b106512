"""The isolated lab's pieces that need no host: addresses, the nftables ruleset (checked by nft
itself), the host's network unit (checked by systemd-analyze), and the inventory it writes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from acceldeploy_lab import isolation
from acceldeploy_lab.inventory import InventoryHost, inventory_data


def test_addresses() -> None:
    assert isolation.host_address(1) == "10.213.0.11"
    assert isolation.CONTROLLER == "10.213.0.1"
    with pytest.raises(isolation.IsolationError, match="1 to 200"):
        isolation.host_address(201)


@pytest.mark.skipif(shutil.which("nft") is None, reason="nft not installed (make host-deps)")
def test_ruleset_passes_nft_check() -> None:
    ruleset = isolation.ruleset()
    assert "tcp dport { 8093 } counter accept" in ruleset
    assert 'counter drop comment "lab-host-to-controller-other"' in ruleset
    done = subprocess.run(["nft", "--check", "-f", "-"], input=ruleset, text=True,
                          capture_output=True)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_network_unit_passes_systemd_analyze(tmp_path: Path) -> None:
    unit = tmp_path / "acceldeploy-lab-net.service"
    unit.write_text(isolation.unit_file("10.213.0.11"))
    assert "ExecStart=/sbin/ip addr replace 10.213.0.11/24 dev host0" in unit.read_text()
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert "acceldeploy-lab-net.service" not in done.stderr, done.stderr


def test_inventory_of_isolated_hosts(tmp_path: Path) -> None:
    key = tmp_path / "id"
    hosts = [InventoryHost("lab1", 1, 22, "bookworm", "10.213.0.11"),
             InventoryHost("lab2", 2, 22, "trixie", "10.213.0.12")]  # fmt: skip
    lab = inventory_data(hosts, key)["all"]["children"]["lab"]
    assert lab["vars"]["acceldeploy_bundle_listen"] == "10.213.0.1"
    assert lab["hosts"]["lab1"]["ansible_host"] == "10.213.0.11"
    assert lab["hosts"]["lab1"]["acceldeploy_os"] == "debian-12"
    assert lab["hosts"]["lab2"]["acceldeploy_os"] == "debian-13"
    shared = inventory_data([InventoryHost("lab1", 1, 2201)], key)["all"]["children"]["lab"]
    assert shared["vars"]["acceldeploy_bundle_listen"] == "127.0.0.1"
    assert shared["hosts"]["lab1"]["ansible_host"] == "127.0.0.1"
