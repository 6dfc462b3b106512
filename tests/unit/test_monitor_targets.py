"""What the monitors scrape (acceldeploy.monitor.targets), from the lab's inventory and the
examples: every service's /metrics where the monitors reach it, node exporter on every host,
each Ray node's metrics, the device exporters when the inventory says they run; and the
refusals, naming the variable."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy.errors import AcceldeployError
from acceldeploy.lab.inventory import InventoryHost, write_inventory
from acceldeploy.monitor import targets
from acceldeploy.serving import selection

ROOT = Path(__file__).resolve().parents[2]


def lab(tmp_path: Path, **extra: Any) -> dict[str, dict[str, Any]]:
    shutil.copytree(ROOT / "inventory/lab/group_vars", tmp_path / "group_vars")
    path = write_inventory(tmp_path / "hosts.yml", [
        InventoryHost("lab1", 1, 2201), InventoryHost("lab2", 2, 2202),
        InventoryHost("lab3", 3, 2203, gateway=True), InventoryHost("lab4", 4, 2204, monitor=True),
    ], tmp_path / "id")  # fmt: skip
    if extra:
        (tmp_path / "host_vars").mkdir()
        for host, variables in extra.items():
            (tmp_path / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(variables))
    return selection.every_host(str(path))


def test_the_labs_targets(tmp_path: Path) -> None:
    sd = targets.file_sd(targets.targets(lab(tmp_path)))
    assert sd["vllm"] == [
        {"targets": ["127.0.0.1:8001"], "labels": {"host": "lab1", "service": "qwen3-vl",
                                                   "platform": "cpu"}},
        {"targets": ["127.0.0.1:8002"], "labels": {"host": "lab2", "service": "qwen3-vl",
                                                   "platform": "cpu"}},
    ]  # fmt: skip
    # every host, the gateway and the monitor too, each on its own port in the shared lab
    assert [(g["targets"], g["labels"]["host"]) for g in sd["node"]] == [
        ([f"127.0.0.1:{9100 + i}"], f"lab{i}") for i in range(1, 5)]  # fmt: skip
    assert sd["ray"] == sd["npu"] == sd["gaudi"] == []


def test_a_multi_node_groups_ray_nodes_and_the_device_exporters() -> None:
    every = selection.every_host(str(ROOT / "inventory/examples/ascend-910b-2node/hosts.yml"))
    every["mon1"] = {"group_names": ["monitors"], "ansible_host": "192.0.2.5"}
    for hv in every.values():
        hv["monitor_device_exporters"] = True
        hv["acceldeploy_services"] = [{**s, "host": "0.0.0.0", "api_key": "sk-0123456789abcdef"}
                                      for s in hv.get("acceldeploy_services") or []]  # fmt: skip
    sd = targets.file_sd(targets.targets(every))
    assert [(g["targets"], g["labels"]["host"]) for g in sd["ray"]] == [
        (["192.0.2.31:6380"], "npu-01"), (["192.0.2.32:6380"], "npu-02")]  # fmt: skip
    assert [g["labels"]["host"] for g in sd["vllm"]] == ["npu-01"]  # the head answers
    assert [g["targets"] for g in sd["npu"]] == [["192.0.2.31:8082"], ["192.0.2.32:8082"]]


def test_a_loopback_service_is_out_of_a_remote_monitors_reach(tmp_path: Path) -> None:
    every = lab(tmp_path, lab4={"ansible_host": "10.0.0.4"})
    with pytest.raises(AcceldeployError) as caught:
        targets.targets(every)
    assert (
        "qwen3-vl on lab1 binds 127.0.0.1, which a monitor on another machine cannot reach"
        in str(caught.value)
    )


def test_no_monitor_is_refused(tmp_path: Path) -> None:
    every = {h: hv for h, hv in lab(tmp_path).items() if h != "lab4"}
    with pytest.raises(AcceldeployError, match="the monitors group is empty"):
        targets.targets(every)


def test_a_host_runs_its_services_units_and_a_workers_ray_unit() -> None:
    every = selection.every_host(str(ROOT / "inventory/examples/ascend-910b-2node/hosts.yml"))
    assert targets.host_units("npu-01", every["npu-01"]) == ["ray-deepseek-r1.service",
                                                             "deepseek-r1.service"]  # fmt: skip
    assert targets.host_units("npu-02", every["npu-02"]) == ["ray-deepseek-r1.service"]


def test_the_roles_install_what_the_bundle_carries() -> None:
    """One list of packages each: the roles' vars say what Python's constants say."""
    from acceldeploy.gateway import plan

    gateway = yaml.safe_load((ROOT / "roles/gateway/vars/main.yml").read_text())
    monitor = yaml.safe_load((ROOT / "roles/monitor/vars/main.yml").read_text())
    assert tuple(gateway["gateway_packages"]) == plan.PACKAGES
    assert tuple(monitor["monitor_prometheus_packages"]) == targets.PACKAGES
    assert tuple(monitor["monitor_node_packages"]) == targets.NODE_PACKAGES
