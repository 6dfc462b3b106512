"""The lab's gateway hosts (tools/lab.py up --gateways N, down --host NAME) in its inventory,
and the apt source every lab host gets (the lab's own repository, nothing else)."""

from __future__ import annotations

from pathlib import Path

import yaml

from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy_lab import ospackages, rootfs
from acceldeploy_lab.inventory import InventoryHost, drop_hosts, read_inventory, write_inventory


def test_gateways_are_their_own_group_and_leave_with_down_host(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    hosts = [InventoryHost("lab1", 1, 2201), InventoryHost("lab2", 2, 2202),
             InventoryHost("lab3", 3, 2203, gateway=True)]  # fmt: skip
    write_inventory(path, hosts, tmp_path / "id")
    children = yaml.safe_load(path.read_text())["all"]["children"]
    assert list(children["lab"]["hosts"]) == ["lab1", "lab2"]
    assert list(children["gateways"]["hosts"]) == ["lab3"]
    assert list(read_inventory(path)) == ["lab1", "lab2"]
    seen = hosts_vars(str(path))
    assert seen["lab3"]["group_names"] == ["gateways"] and seen["lab1"]["group_names"] == ["lab"]
    drop_hosts(path, ["lab3"])
    assert "gateways" not in yaml.safe_load(path.read_text())["all"]["children"]
    assert list(hosts_vars(str(path))) == ["lab1", "lab2"]


def test_a_hosts_only_apt_source_is_the_labs_repository() -> None:
    line = ospackages.sources_line("http://127.0.0.1:8091/", rootfs.SUITES["trixie"].name)
    assert line == "deb [trusted=yes] http://127.0.0.1:8091/os/trixie/ ./\n"
