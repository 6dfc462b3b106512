"""What the monitors scrape (acceldeploy.monitor.targets), from the lab's inventory and the
examples: every service's /metrics where the monitors reach it, node exporter on every host,
each Ray node's metrics, the device exporters when the inventory says they run; the vLLM
series names of the scraped services' stacks; and the refusals, naming the variable (or both
stacks, when two name a series differently), in the monitor role's plan too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy.errors import AcceldeployError
from acceldeploy.monitor import rules, targets
from acceldeploy.planner import stacks
from acceldeploy.serving import selection
from acceldeploy_lab.inventory import InventoryHost, write_inventory

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


def renaming(directory: Path, **names: str) -> str:
    """versions/stacks.yml with cpu-vllm-0.13.0 listing these metrics names, in `directory`."""
    data = yaml.safe_load(stacks.STACKS_FILE.read_text())
    data["stacks"]["cpu-vllm-0.13.0"]["metrics"] = names
    directory.mkdir(parents=True)
    path = directory / "stacks.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_the_series_are_named_by_the_scraped_services_stacks(tmp_path: Path) -> None:
    assert targets.series(lab(tmp_path / "default")) == rules.DEFAULT_SERIES
    moved = {
        "acceldeploy_stack": "cpu-vllm-0.13.0",
        "python_env_stacks_file": renaming(tmp_path / "s1", running="vllm:requests_running"),
    }
    every = lab(tmp_path / "moved", lab1=moved, lab2=moved)
    assert targets.series(every) == {**rules.DEFAULT_SERIES, "running": "vllm:requests_running"}
    # what the monitor role's plan passes: the hosts' views
    views = {host: targets.host_view(hv) for host, hv in every.items()}
    assert targets.series(views)["running"] == "vllm:requests_running"
    # a series the monitor does not read may differ; a host it does not scrape does not count
    other = {
        **moved,
        "python_env_stacks_file": renaming(tmp_path / "s2", mm_cache_hits="vllm:mm_hits"),
    }
    assert targets.series(lab(tmp_path / "other", lab2=other)) == rules.DEFAULT_SERIES
    assert targets.series(lab(tmp_path / "monitor", lab4=moved)) == rules.DEFAULT_SERIES


def test_stacks_naming_a_series_differently_give_both_names(tmp_path: Path) -> None:
    """A fleet halfway through an upgrade to a stack that renames a series: both names, in
    the order of the stacks, which rules.settings reads as one recorded series."""
    path = renaming(tmp_path / "s1", running="vllm:requests_running")
    every = lab(tmp_path / "inv", lab2={"acceldeploy_stack": "cpu-vllm-0.13.0",
                                       "python_env_stacks_file": path})  # fmt: skip
    found = targets.series(every)
    assert found["running"] == "vllm:num_requests_running|vllm:requests_running"
    assert {k: v for k, v in found.items() if k != "running"} == {
        k: v for k, v in rules.DEFAULT_SERIES.items() if k != "running"
    }
    settings = rules.settings({"metrics": found})
    assert settings.metrics["running"] == "acceldeploy:vllm_running"
    assert settings.alternatives == {
        "running": ("vllm:num_requests_running", "vllm:requests_running")
    }
    bad = renaming(tmp_path / "s2", waiting="vllm:requests waiting")
    every = lab(tmp_path / "bad", lab1={"acceldeploy_stack": "cpu-vllm-0.13.0",
                                       "python_env_stacks_file": bad})  # fmt: skip
    with pytest.raises(AcceldeployError, match=r"metrics\.waiting 'vllm:requests waiting' is not"):
        targets.series(every)
    unknown = lab(tmp_path / "unknown", lab1={"acceldeploy_stack": "cpu-vllm-9"})
    with pytest.raises(AcceldeployError, match=r"^lab1: acceldeploy_stack 'cpu-vllm-9' is not"):
        targets.series(unknown)


def plan(tmp_path: Path, **extra: Any) -> subprocess.CompletedProcess[str]:
    """The monitor role's plan on the lab's inventory, lab4 (the monitor) on this machine; its
    rule file written beside the inventory."""
    lab(tmp_path, lab4={"ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable}, **extra)  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps([{"hosts": "monitors", "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "acceldeploy.fleet.monitor",
                                                    "tasks_from": "plan"}},
                  {"ansible.builtin.copy": {"content": "{{ monitor_rules | to_nice_yaml(indent=2, width=1000) }}",
                                            "dest": str(tmp_path / "rules.yml")}}]}]))  # fmt: skip
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "PYTHONPATH": str(ROOT / "tools"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip


def test_the_roles_plan_renders_the_stacks_names_and_both_when_half_moved(tmp_path: Path) -> None:
    """The plan preflight runs (playbooks/preflight.yml's second play): the fleet moved to a
    stack that renames a series gets rules with its name; half moved, one series recorded from
    both names, which the alert reads."""
    path = renaming(tmp_path / "s1", kv_cache_usage="vllm:kv_cache_used_ratio")
    moved = {"acceldeploy_stack": "cpu-vllm-0.13.0", "python_env_stacks_file": path}
    run = plan(tmp_path / "moved", lab1=moved, lab2=moved)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = (tmp_path / "moved" / "rules.yml").read_text()
    assert 'vllm:kv_cache_used_ratio{job="vllm"} > 0.9' in text
    assert "vllm:kv_cache_usage_perc" not in text
    run = plan(tmp_path / "half", lab2=moved)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    document = yaml.safe_load((tmp_path / "half" / "rules.yml").read_text())
    records = {r["record"]: r["expr"] for r in document["groups"][0]["rules"]}
    assert records["acceldeploy:vllm_kv_cache_usage"] == (
        "vllm:kv_cache_usage_perc or vllm:kv_cache_used_ratio"
    )
    alerts = {r["alert"]: r["expr"] for r in document["groups"][1]["rules"]}
    assert alerts["VllmKvCacheFull"] == 'acceldeploy:vllm_kv_cache_usage{job="vllm"} > 0.9'


def test_the_no_op_path_watches_every_file_and_unit_the_role_leaves_on_a_host() -> None:
    from acceldeploy.monitor import record

    paths = {"config_dir": "/etc/prometheus", "libexec_dir": "/x", "grafana_dir": "/g"}
    node = record.spec({"exporter": None}, False, paths)
    assert node["units"] == [
        "prometheus-node-exporter.service",
        "acceldeploy-service-memory.service",
    ]
    assert "/x/unitmemory.py" in node["files"] and not node["trees"]
    npu = record.spec({"exporter": "npu", "binary": "/usr/local/bin/npu-exporter"}, False, paths)
    assert "/usr/local/bin/npu-exporter" in npu["files"] and "npu-exporter.service" in npu["units"]
    gaudi = record.spec({"exporter": "gaudi"}, False, paths)
    assert gaudi["units"][-1] == "gaudi-metric-exporter.service"
    monitor = record.spec({"exporter": None}, True, paths)
    assert "/etc/prometheus/prometheus.yml" in monitor["files"] and monitor["trees"] == ["/g"]
    assert monitor["units"][-1] == "prometheus.service"
    assert not record.spec({}, True, {**paths, "grafana_dir": ""})["trees"]
