"""Preflight's one controller-side pass (plugins/action/acceldeploy_preflight.py): one call
checks every host of the run, the gateways and the monitors too, and every failing host is
refused in the same run, naming the variable, before any host is contacted; the facts it hands
the later stages are the ones playbooks/preflight.yml sets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import yaml
from playbook_report import lab_inventory, playbook_report

from acceldeploy import roles

ROOT = Path(__file__).resolve().parents[2]
CLOSED = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_ssh_retries": 0}
PASS_TASK = "Every role's inputs, for every host of the run, in one pass on the controller"
HOST_TASK = "This host's inputs passed (each failure names the variable and the fix)"
ALL_TASK = "Every host's inputs passed (else the run stops here and no host is contacted)"


def preflight_plays() -> list[dict[str, Any]]:
    return list(yaml.safe_load((ROOT / "playbooks/preflight.yml").read_text()))


def pass_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "acceldeploy_preflight", ROOT / "plugins/action/acceldeploy_preflight.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_the_playbook_sets_every_fact_the_pass_delivers() -> None:
    (task,) = [t for t in preflight_plays()[0]["tasks"]
               if t["name"] == "This host's plan, for the stages that follow"]  # fmt: skip
    assert set(task["ansible.builtin.set_fact"]) == set(pass_module().FACTS)


def test_each_step_runs_its_roles_contract_and_delivers_the_roles_facts() -> None:
    module = pass_module()
    steps = [*module.SERVING, module.WEIGHTS_PART, module.GATEWAY, module.MONITOR]
    for step in steps:
        assert roles.has_part(step.role, step.part), step
        assert all(fact.startswith(f"{step.role}_") for fact in step.facts), step


def fleet(tmp_path: Path, **extra: dict[str, Any]) -> Path:
    """The lab's inventory (lab3 a gateway, lab4 a monitor), every host at a closed port."""
    hosts = ("lab1", "lab2", "lab3", "lab4")
    return lab_inventory(tmp_path, **{h: {**CLOSED, **extra.get(h, {})} for h in hosts})


def run_preflight(inventory: Path) -> tuple[int, dict[str, Any]]:
    return playbook_report(inventory, "playbooks/preflight.yml")


def test_every_bad_host_serving_gateway_or_monitor_is_refused_in_one_run(tmp_path: Path) -> None:
    timeouts = yaml.safe_load((ROOT / "roles/gateway/defaults/main.yml").read_text())
    inventory = fleet(
        tmp_path,
        lab1={"python_env_manager": "pipx"},
        lab3={"gateway_timeouts": {**timeouts["gateway_timeouts"], "client": "10 minutes"}},
        lab4={"monitor_retention": "15days", "monitor_node_exporter_port": 2204},
    )
    code, data = run_preflight(inventory)
    assert code != 0
    assert [p["play"]["name"] for p in data["plays"]] == [
        "Preflight - check the inventory before changing any host"
    ]
    assert all(s["unreachable"] == 0 and s["changed"] == 0 for s in data["stats"].values())
    tasks = {t["task"]["name"]: t["hosts"] for t in data["plays"][0]["tasks"]}
    assert len(tasks[PASS_TASK]) == 1  # one call for the whole fleet
    refused = {h: str(r["msg"]) for h, r in tasks[HOST_TASK].items() if r.get("failed")}
    assert set(refused) == {"lab1", "lab3", "lab4"}, refused
    assert "python_env_manager" in refused["lab1"]
    assert "gateway_timeouts.client must be a HAProxy duration" in refused["lab3"]
    assert "monitor_retention must be a Prometheus duration" in refused["lab4"]
    stopped = str(tasks[ALL_TASK]["lab2"]["msg"])
    assert "preflight refused lab1, lab3, lab4" in stopped, stopped


def test_the_pass_hands_each_host_its_plan(tmp_path: Path) -> None:
    """The lab's fleet passes; the run goes on to the first contact (the closed port stops it),
    each serving host carrying its units and environment, the gateway its plan."""
    code, data = run_preflight(fleet(tmp_path))
    assert code != 0
    names = [p["play"]["name"] for p in data["plays"]]
    assert names[-1] == "Preflight - first contact with each host, then the controller's downloads"
    tasks = {t["task"]["name"]: t["hosts"] for t in data["plays"][0]["tasks"]}
    assert not any(r.get("failed") for r in tasks[HOST_TASK].values())
    shown = tasks["Show what each service will run"]
    (lines,) = [r["msg"] for r in shown.values()]
    assert [line.split(":")[0] for line in lines] == ["lab1", "lab2"]
    assert all("vllm serve" in line or "vllm" in line for line in lines)
    unreachable = {h for h, s in data["stats"].items() if s["unreachable"]}
    assert unreachable == {"lab1", "lab2"}


def test_a_gateway_certificate_that_is_not_there_stops_the_run_before_any_change(
    tmp_path: Path,
) -> None:
    """lab3, the gateway, reached with the local connection; the serving hosts at a closed
    port: the inventory passes, then the gateways' first contact refuses the certificate and
    the run ends there, before any serving host is contacted."""
    missing = tmp_path / "certs/gateway.pem"
    local = {"ansible_connection": "local", "gateway_tls_certificate": str(missing)}
    code, data = run_preflight(fleet(tmp_path, lab3=local))
    assert code != 0
    assert [p["play"]["name"] for p in data["plays"]][-1] == (
        "Preflight - the gateways' TLS certificate (read-only)"
    )
    assert all(s["changed"] == 0 and s["unreachable"] == 0 for s in data["stats"].values())
    failed = [str(r.get("msg", "")) for play in data["plays"] for task in play["tasks"]
              for r in task["hosts"].values() if r.get("failed")]  # fmt: skip
    assert failed == [
        f"gateway_tls_certificate {missing} on lab3: no such file; put the PEM (certificate, "
        "chain and key) there before the run, or leave gateway_tls_certificate empty for no TLS"
    ]
    assert not missing.parent.exists()


def test_a_host_on_a_stack_with_known_defects_is_warned_in_one_line(tmp_path: Path) -> None:
    """The default Ascend stack carries the torch-npu 2.8.0 leak (versions/stacks.yml
    known_defects): preflight passes and warns once per host, naming the stack and each
    defect; a warning, not a refusal."""
    import shutil

    inventory = tmp_path / "ascend-910b"
    shutil.copytree(ROOT / "inventory/examples/ascend-910b", inventory)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    names = sorted(hosts["all"]["children"]["ascend"]["hosts"])
    (inventory / "host_vars").mkdir(exist_ok=True)
    for host in names:
        (inventory / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(CLOSED))
    code, data = run_preflight(inventory)
    tasks = {t["task"]["name"]: t["hosts"] for t in data["plays"][0]["tasks"]}
    ((_, result),) = tasks[PASS_TASK].items()
    assert not any(r.get("failed") for r in tasks[HOST_TASK].values())
    assert sorted(result["warnings"]) == [
        f"{host}: stack ascend-vllm-0.12.0rc1 has known defects: torch-npu-2.8.0-memory-leak "
        "(torch-npu 2.8.0 (vllm-ascend 0.12.0rc1's wheel metadata pins torch-npu==2.8.0)), "
        "dp-execute-model-timeout (worked around: execute_model_timeout); what each does and "
        "its fix: acceldeploy plan stacks"
        for host in names
    ]
    assert code != 0  # the hosts are at a closed port: the first contact fails, after the pass
