"""One model split over hosts by vLLM's own multiprocessing (backend nnodes, inventory/lab-split):
each node's argv and unit, the stack's say on what it can split (versions/stacks.yml
nnodes_split), the gate's port, the monitor's view. The argv passes the stack's recorded options
here; vLLM 0.32.0's own parser runs on the lab."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit_files import analyze_host_plan

from acceldeploy.errors import AcceldeployError
from acceldeploy.monitor import targets
from acceldeploy.planner.engineopts import engine_options
from acceldeploy.serving import hostplan
from acceldeploy.serving.unit import render_files

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventory/lab-split"


def hosts(**change: Any) -> dict[str, dict[str, Any]]:
    """inventory/lab-split's two hosts (its hosts.yml is the running lab's), `change` applied to
    the group's variables, or to its service when the key is one of the service's."""
    shared = yaml.safe_load((LAB / "group_vars/all.yml").read_text())
    (service,) = shared["acceldeploy_services"]
    for key, value in change.items():
        (service if key in service or key == "pipeline_parallel_size" else shared)[key] = value
    return hostplan.with_node_ips({
        host: {**shared, **yaml.safe_load((LAB / f"host_vars/{host}.yml").read_text()),
               "acceldeploy_platform": "cpu", "inventory_hostname": host}
        for host in ("lab1", "lab2")
    })  # fmt: skip


def plans(**change: Any) -> dict[str, hostplan.HostPlan]:
    return {host: hostplan.host_plan(hv) for host, hv in hosts(**change).items()}


def test_the_head_serves_and_the_other_node_runs_its_share_headless() -> None:
    by_host = plans()
    (head,) = by_host["lab1"].launches()
    assert by_host["lab2"].launches() == [] and by_host["lab1"].node_units() == []
    (node,) = by_host["lab2"].node_units()
    assert node.name == "node-qwen3-vl-tp"
    for argv, rank in ((head.argv, "0"), (node.argv, "1")):
        text = " ".join(argv)
        assert "--tensor-parallel-size 2 " in text
        assert "--nnodes 2 --node-rank " + rank in text
        assert "--master-addr 127.0.0.31 --master-port 29501" in text
        assert "--distributed-executor-backend" not in argv and "--data-parallel-size" not in argv
    assert "--headless" not in head.argv and "--headless" in node.argv
    assert (head.env["VLLM_HOST_IP"], node.env["VLLM_HOST_IP"]) == ("127.0.0.31", "127.0.0.32")
    assert "RAY_ADDRESS" not in head.env and "RAY_ADDRESS" not in node.env
    assert (
        node.health_url == ""
        and "node 1 (headless) of the group headed by lab1" in (render_files(node)[node.unit_path])
    )


def test_every_nodes_argv_uses_only_options_its_engine_has() -> None:
    for host, plan in plans().items():
        engine = engine_options(plan.platform.engine_options)
        assert engine.version == "0.32.0"
        for argv in [x.argv for x in plan.launches()] + [u.argv for u in plan.node_units()]:
            flags = [a for a in argv if a.startswith("--")]
            assert flags and all(flag in engine.options for flag in flags), (host, flags)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"acceldeploy_stack": "cpu-vllm-0.12.0"},
         "backend nnodes splits one model over the nodes with vLLM's own --nnodes, which stack "
         "cpu-vllm-0.12.0 (vLLM 0.12.0) cannot run"),
        ({"tensor_parallel_size": 1, "pipeline_parallel_size": 2},
         ".pipeline_parallel_size: stack cpu-vllm-0.32.0 (vLLM 0.32.0) splits only tensor "
         "parallelism over hosts with --nnodes, not pipeline"),
        ({"backend": "mpi"}, ".backend must be one of ray, mp, nnodes"),
    ],
)  # fmt: skip
def test_a_stack_that_cannot_split_is_refused_naming_the_variable(
    change: dict[str, Any], says: str
) -> None:
    with pytest.raises(AcceldeployError, match="acceldeploy_services") as raised:
        plans(**change)
    assert says in str(raised.value)


def test_each_node_gates_the_heads_master_port() -> None:
    every = hosts()
    gates = {h: u.readiness for h, hv in every.items() for u in hostplan.plan_host(hv)
             if u.readiness}  # fmt: skip
    assert gates["lab1"]["free_ports"][0]["port"] == 29501
    assert "--master-port" in gates["lab1"]["free_ports"][0]["what"]
    assert (gates["lab2"]["dials"][0]["address"], gates["lab2"]["dials"][0]["port"]) == (
        "127.0.0.31", 29501)  # fmt: skip
    assert gates["lab2"]["units_by_node"] == {"lab1": ["qwen3-vl-tp"],
                                               "lab2": ["node-qwen3-vl-tp"]}  # fmt: skip


def test_the_monitor_watches_the_head_and_the_node_unit() -> None:
    every = hosts()
    assert targets.host_units("lab1", every["lab1"]) == ["qwen3-vl-tp.service"]
    assert targets.host_units("lab2", every["lab2"]) == ["node-qwen3-vl-tp.service"]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
@pytest.mark.parametrize("host", ["lab1", "lab2"])
def test_rendered_units_pass_systemd_analyze_verify(host: str, tmp_path: Path) -> None:
    names = analyze_host_plan(plans()[host], tmp_path, ("vllm-ready", "vllm-drain"))
    assert names == ({"qwen3-vl-tp"} if host == "lab1" else {"node-qwen3-vl-tp"})
