"""Data parallel across hosts (backend mp, upstream's multi-node recipe): the service's layout
checks, the head's and each headless rank's argv and env, the node units (rendered and checked
by systemd-analyze), the monitor's view of the group, and `plan render` printing both nodes.
The argv of each node passes the stack's recorded options; the real parser runs on the lab
(tests/lab/test_dp_group_lab.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from unit_files import analyze_host_plan

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.monitor import targets
from acceldeploy.planner.engineopts import engine_options
from acceldeploy.serving import cluster, hostplan
from acceldeploy.serving.service import parse_service
from acceldeploy.serving.unit import render_files

ROOT = Path(__file__).resolve().parents[2]
DP = str(ROOT / "inventory/examples/ascend-910b-2node-dp")
LAB = ROOT / "inventory/lab-dp/group_vars/all.yml"
BASE = {"name": "m", "model": "Qwen/Qwen3-VL-8B-Instruct", "nodes": ["a", "b"],
        "devices": [0, 1, 2, 3]}  # fmt: skip


def every() -> dict[str, dict[str, Any]]:
    return hostplan.with_node_ips(hosts_vars(DP))


def plans() -> dict[str, hostplan.HostPlan]:
    return {host: hostplan.host_plan(hv) for host, hv in every().items()}


def test_a_service_over_nodes_keeps_ray_unless_it_says_mp() -> None:
    ray = parse_service(BASE, "ascend", 0)
    assert ray.backend is not None
    assert (ray.backend.name, ray.cluster_port, ray.tensor_parallel_size) == ("ray", 6379, 8)
    mp = parse_service({**BASE, "backend": "mp"}, "ascend", 0)
    # a whole replica per node: TP over the node's own 4 devices, not over both nodes'
    assert mp.backend is not None
    assert (mp.backend.name, mp.cluster_port, mp.tensor_parallel_size) == ("mp", 13389, 4)
    assert mp.backend.replica_per_node and not ray.backend.replica_per_node
    assert (mp.engines, ray.engines) == (2, 1)
    one = parse_service({"name": "one", "model": "Qwen/Qwen3-VL-8B-Instruct"}, "cpu", 0)
    assert one.backend is None


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"backend": "nccl"}, "acceldeploy_services[0] (m).backend must be one of ray, mp"),
        ({"nodes": None, "backend": "mp"}, "acceldeploy_services[0] (m).backend is for a service over several hosts"),
        ({"backend": "mp", "port": 13389}, "cluster_port 13389 is also its port"),
        ({"backend": "mp", "tensor_parallel_size": 8}, "tensor_parallel_size is 8 but devices has 4 entries"),
    ],
    ids=["unknown", "no-nodes", "port", "tp-over-nodes"],
)  # fmt: skip
def test_bad_mp_layouts_name_the_variable(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(AcceldeployError, match=None) as caught:
        parse_service({**BASE, **changes}, "ascend", 0)
    assert says in str(caught.value)


def test_the_head_serves_and_every_other_node_runs_a_headless_rank() -> None:
    by_host = plans()
    (head,) = by_host["npu-01"].launches()
    assert by_host["npu-02"].launches() == []  # the head's API server answers for the group
    assert by_host["npu-01"].node_units() == []  # the head's own vLLM is rank 0
    (rank,) = by_host["npu-02"].node_units()
    assert rank.name == "dp-qwen3-vl-235b"
    group = ["--data-parallel-size", "2", "--data-parallel-size-local", "1",
             "--data-parallel-address", "192.0.2.41", "--data-parallel-rpc-port", "13389"]  # fmt: skip
    for argv in (head.argv, rank.argv):
        assert " ".join(group) in " ".join(argv)
        assert "--distributed-executor-backend" not in argv
        assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
        assert "--enable-expert-parallel" in argv and "ascend" in argv  # the catalog's flags
    assert "--headless" not in head.argv and "--api-server-count" in head.argv
    assert rank.argv[rank.argv.index("--data-parallel-start-rank") + 1] == "1"
    assert "--headless" in rank.argv and "--api-server-count" not in rank.argv
    # each node its own address and NIC variables; no Ray anywhere
    assert (head.env["HCCL_IF_IP"], rank.env["HCCL_IF_IP"]) == ("192.0.2.41", "192.0.2.42")
    assert head.env["HCCL_SOCKET_IFNAME"] == rank.env["HCCL_SOCKET_IFNAME"] == "enp189s0f0"
    assert "RAY_ADDRESS" not in head.env and "RAY_ADDRESS" not in rank.env
    assert head.ray_unit is None


def test_every_nodes_argv_uses_only_options_its_engine_has() -> None:
    for host, plan in plans().items():
        engine = engine_options(plan.platform.engine_options)
        argvs = [x.argv for x in plan.launches()] + [u.argv for u in plan.node_units()]
        for argv in argvs:
            flags = [a for a in argv if a.startswith("--")]
            assert flags and all(flag in engine.options for flag in flags), (host, flags)


def test_the_headless_rank_has_no_api_of_its_own() -> None:
    (rank,) = plans()["npu-02"].node_units()
    assert rank.health_url == "" and rank.base_url == ""
    text = render_files(rank)[rank.unit_path]
    assert "ExecStartPost" not in text and "ExecStop=" not in text
    assert "data-parallel rank 1 (headless) of the group headed by npu-01" in text
    assert rank.secret_path is None or "VLLM_API_KEY" not in rank.env


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
@pytest.mark.parametrize("host", ["npu-01", "npu-02"])
def test_rendered_units_pass_systemd_analyze_verify(host: str, tmp_path: Path) -> None:
    names = analyze_host_plan(plans()[host], tmp_path, ("vllm-ready", "vllm-drain"))
    assert names == ({"qwen3-vl-235b"} if host == "npu-01" else {"dp-qwen3-vl-235b"})


def test_the_nodes_must_agree_on_the_backend() -> None:
    views = {}
    for host, hv in every().items():
        services = [dict(s) for s in hv["acceldeploy_services"]]
        if host == "npu-02":  # TP over both nodes' 16 devices, as Ray would run it
            services[0].update(backend="ray", tensor_parallel_size=16)
        plan = hostplan.host_plan({**hv, "acceldeploy_services": services})
        views[host] = {**cluster.node_view(plan.platform.name, "", plan.services), "pins": ""}
    errors = cluster.check_groups(views)
    assert any("(qwen3-vl-235b).backend: npu-01 has 'mp', npu-02 has 'ray'" in e for e in errors)


def test_the_monitor_watches_the_head_and_each_rank_unit_and_no_ray() -> None:
    hosts = every()
    assert targets.host_units("npu-01", hosts["npu-01"]) == ["qwen3-vl-235b.service"]
    assert targets.host_units("npu-02", hosts["npu-02"]) == ["dp-qwen3-vl-235b.service"]


def test_plan_render_prints_both_nodes() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/plan.py"), "render", "-i", DP, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rendered = json.loads(proc.stdout)
    assert [(r["inventory_hostname"], r["name"]) for r in rendered] == [
        ("npu-01", "qwen3-vl-235b"), ("npu-02", "dp-qwen3-vl-235b")]  # fmt: skip
    text = subprocess.run(
        [sys.executable, str(ROOT / "tools/plan.py"), "render", "-i", DP],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "# dp-qwen3-vl-235b on npu-02 (ascend)" in text and "HCCL_IF_IP=192.0.2.42" in text


def test_the_lab_inventory_is_a_two_node_mp_group() -> None:
    import yaml

    (service,) = yaml.safe_load(LAB.read_text())["acceldeploy_services"]
    assert service["backend"] == "mp" and service["nodes"] == ["lab1", "lab2"]


def test_the_heads_and_the_ranks_launchers_start_their_watch_before_the_server() -> None:
    (rank,) = plans()["npu-02"].node_units()
    launcher = render_files(rank)[rank.launcher_path]
    helper = "/usr/bin/python3 /usr/local/libexec/acceldeploy/vllm-dp-watch"
    watch = f"{helper} $$ 5 3 192.0.2.41 --head 192.0.2.41 --bind 192.0.2.42 &"
    assert watch in launcher
    assert launcher.index(watch) < launcher.index("\nexec ")
    (head,) = plans()["npu-01"].units()
    launcher = render_files(head)[head.launcher_path]
    watch = f"{helper} $$ 5 3 192.0.2.42 --bind 192.0.2.41 &"
    assert watch in launcher and launcher.index(watch) < launcher.index("\nexec ")


def test_the_heads_gate_sends_two_prompts_per_engine_so_every_engine_has_served() -> None:
    (head,) = plans()["npu-01"].units()
    assert head.gate_prompts == 4  # two nodes, one engine each
    (rank,) = plans()["npu-02"].node_units()
    assert rank.gate_prompts == 1 and not rank.health_url  # no API server: never gated
