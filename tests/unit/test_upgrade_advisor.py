"""The upgrade advisor (upgrade.py, `acceldeploy plan upgrade`): on the lab's inventory
moving to another cpu stack it refuses nothing that would deploy, and it names what a move
would break: an extra_args key the target's recorded parser rejects, an env variable the
target engine no longer reads (from the recorded envs.py names), a series the project reads
that the target's recorded /metrics lacks; what nobody recorded is said unchecked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy import upgrade
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.planner import enginefacts, stacks
from acceldeploy_lab import enginefacts as recorder

REPO = Path(__file__).resolve().parents[2]


def lab_inventory(tmp_path: Path, service_changes: dict[str, Any] | None = None) -> Path:
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "lab" / "group_vars", inventory / "group_vars")
    hosts = {"lab1": {"ansible_host": "127.0.0.1", "lab_index": 1}}
    lab = {"vars": {"acceldeploy_platform": "cpu"}, "hosts": hosts}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"lab": lab}}}))
    if service_changes:
        group = inventory / "group_vars" / "all.yml"
        data = yaml.safe_load(group.read_text())
        (service,) = data["acceldeploy_services"]
        for key, value in service_changes.items():
            service[key] = {**service.get(key, {}), **value}
        group.write_text(yaml.safe_dump(data))
    return inventory


def test_moving_the_lab_to_0_13_blocks_nothing(tmp_path: Path) -> None:
    found = upgrade.advise(hosts_vars(str(lab_inventory(tmp_path))), "cpu-vllm-0.13.0")
    assert not [f for f in found if f.blocking], found
    kinds = {(f.kind, f.what) for f in found}
    assert ("version", "vLLM") in kinds and ("kv", "planner") in kinds, found
    assert not [f for f in found if f.kind in ("env", "metric", "unchecked")], found
    (checked,) = (f for f in found if f.kind == "checked")
    assert "against vLLM 0.13.0's parser; 4 env variables" in checked.detail, checked


def test_an_env_variable_the_target_no_longer_reads_is_named(tmp_path: Path) -> None:
    inventory = lab_inventory(tmp_path, {"env": {"VLLM_RPC_TIMEOUT": "100000"}})
    found = upgrade.advise(hosts_vars(str(inventory)), "cpu-vllm-0.13.0")
    # 0.13.0 still reads it: nothing to say
    assert not [f for f in found if f.kind == "env"], found
    to_023 = upgrade.env_findings(
        "lab1", "qwen3-vl", ["VLLM_RPC_TIMEOUT", "VLLM_CPU_KVCACHE_SPACE"],
        enginefacts.engine_facts("0.12.0"), enginefacts.engine_facts("0.23.0"),
    )  # fmt: skip
    assert [(f.what, f.kind) for f in to_023] == [("VLLM_RPC_TIMEOUT", "env")], to_023
    assert "vLLM 0.12.0 reads it, vLLM 0.23.0 does not" in to_023[0].detail


def test_a_series_the_target_does_not_export_blocks_and_an_unrecorded_one_is_unchecked() -> None:
    current = stacks.load_stacks()["cpu-vllm-0.12.0"]
    renamed = {**current, "name": "x", "metrics": {"kv_cache_usage": "vllm:gpu_cache_usage_perc"}}
    found = upgrade.metric_findings("lab1", current, renamed, enginefacts.engine_facts("0.12.0"))
    details = [f.detail for f in found if (f.kind, f.what) == ("metric", "kv_cache_usage")]
    assert "vllm:kv_cache_usage_perc -> vllm:gpu_cache_usage_perc" in details[0], found
    assert any(f.blocking and "gpu_cache_usage_perc is not among" in f.detail for f in found)
    unrecorded = upgrade.metric_findings(
        "lab1", current, current, enginefacts.engine_facts("0.26.0")
    )
    assert [(f.kind, f.blocking) for f in unrecorded] == [("unchecked", False)], unrecorded


def test_an_option_the_target_rejects_blocks_with_the_parsers_message(tmp_path: Path) -> None:
    inventory = lab_inventory(tmp_path, {"extra_args": {"max-num-seqz": 4}})
    with pytest.raises(AcceldeployError, match="max-num-seqz"):
        upgrade.advise(hosts_vars(str(inventory)), "cpu-vllm-0.13.0")  # the current plan refuses
    from acceldeploy.planner.engineopts import engine_options
    from acceldeploy.serving.service import parse_services

    (service,) = parse_services(
        [{"name": "s", "model": "org/m", "extra_args": {"max-num-seqz": 4}}], "cpu"
    )
    found = upgrade.option_findings("lab1", service, None, engine_options("vllm-0.13.0"))
    assert [(f.what, f.blocking) for f in found] == [("max-num-seqz", True)], found
    assert "did you mean max-num-seqs?" in found[0].detail


def test_a_stack_of_another_platform_or_none_is_refused_naming_the_flag(tmp_path: Path) -> None:
    every = hosts_vars(str(lab_inventory(tmp_path)))
    with pytest.raises(
        AcceldeployError, match=r"--to gaudi-vllm-0.26.0 is a gaudi stack.*cpu-vllm"
    ):
        upgrade.advise(every, "gaudi-vllm-0.26.0")
    with pytest.raises(AcceldeployError, match=r"--to cpu-vllm-9\.9\.9: no such stack"):
        upgrade.advise(every, "cpu-vllm-9.9.9")


def test_the_command_prints_the_findings_as_json(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "acceldeploy.cli", "plan", "upgrade", "-i",
         str(lab_inventory(tmp_path)), "--to", "cpu-vllm-0.13.0", "--json"],
        capture_output=True, text=True, check=False, cwd=REPO / "tools",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {f["kind"] for f in json.loads(proc.stdout)} == {"version", "kv", "checked"}


def test_the_facts_recorder_reads_envs_py_and_an_exposition(tmp_path: Path) -> None:
    envs = "environment_variables: dict[str, object] = {\n  'VLLM_B': 1,\n  'VLLM_A': 2,\n}\n"
    assert recorder.env_names(envs) == ["VLLM_A", "VLLM_B"]
    text = "# TYPE vllm:x_total counter\n# TYPE vllm:x_created gauge\n# TYPE python_info gauge\n"
    assert recorder.metric_families(text) == {"vllm:x_total": "counter"}
    tree = tmp_path / "src" / "vllm"
    tree.mkdir(parents=True)
    (tree / "envs.py").write_text(envs)
    metrics = tmp_path / "m.txt"
    metrics.write_text(text)
    written = recorder.record("9.9.9", tmp_path / "src", metrics, out_dir=tmp_path / "facts")
    document = json.loads(written.read_text())
    assert document["env"]["names"] == ["VLLM_A", "VLLM_B"]
    assert document["metrics"]["families"] == {"vllm:x_total": "counter"}


def ascend_example(tmp_path: Path, extra: dict[str, Any] | None = None) -> str:
    inventory = tmp_path / "ascend-910b"
    shutil.copytree(REPO / "inventory/examples/ascend-910b", inventory)
    if extra:
        group = inventory / "group_vars" / "all.yml"
        group.write_text(yaml.safe_dump({**yaml.safe_load(group.read_text()), **extra}))
    return str(inventory)


CANN_9_1 = {
    "ascend_runtime_cann_install": True,
    "ascend_runtime_cann_toolkit_package": "https://repo.internal/Ascend-cann-toolkit_9.1.0_linux-aarch64.run",
    "ascend_runtime_cann_kernels_package": "/srv/Ascend-cann-kernels-910b_9.1.0_linux-aarch64.run",
    "ascend_runtime_cann_nnal_package": "/srv/Ascend-cann-nnal_9.1.0_linux-aarch64.run",
}  # fmt: skip


def test_an_ascend_move_to_another_cann_blocks_until_the_role_installs_it(tmp_path: Path) -> None:
    every = hosts_vars(ascend_example(tmp_path))
    (runtime,) = [f for f in upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.23.0")
                  if f.kind == "runtime"]  # fmt: skip
    assert runtime.blocking and runtime.what == "CANN"
    assert runtime.detail.startswith(
        "CANN 8.3.RC2 -> 9.1.0: the runtime stage refuses a host whose CANN is not 9.1.0: "
        "install CANN 9.1.0 on the hosts first, or set ascend_runtime_cann_install: true and "
        "ascend_runtime_cann_toolkit_package, ascend_runtime_cann_kernels_package, "
        "ascend_runtime_cann_nnal_package to the CANN 9.1.0 .run packages"
    )
    # with the role told to install it, and the three packages of 9.1.0: the steps, in order
    every = hosts_vars(ascend_example(tmp_path / "set", CANN_9_1))
    found = upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.23.0")
    (runtime,) = [f for f in found if f.kind == "runtime"]
    assert not any(f.blocking for f in found), [f for f in found if f.blocking]
    steps = runtime.detail.split(": ", 2)[2]
    assert steps.startswith("1. download https://repo.internal/Ascend-cann-toolkit_9.1.0_linux-")
    assert "--full" in steps and "2. bash /srv/Ascend-cann-kernels-910b_9.1.0" in steps
    assert "3. bash -c 'source /usr/local/Ascend/ascend-toolkit/set_env.sh" in steps
    # a package of another CANN blocks, naming the variable
    wrong = {
        **CANN_9_1,
        "ascend_runtime_cann_nnal_package": "/srv/Ascend-cann-nnal_8.5.0_linux-aarch64.run",
    }
    every = hosts_vars(ascend_example(tmp_path / "wrong", wrong))
    (runtime,) = [f for f in upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.23.0")
                  if f.kind == "runtime"]  # fmt: skip
    assert runtime.blocking and "ascend_runtime_cann_nnal_package is CANN 8.5.0" in runtime.detail


def test_in_the_release_image_a_cann_move_comes_with_the_image(tmp_path: Path) -> None:
    every = hosts_vars(ascend_example(tmp_path, {"python_env_manager": "container"}))
    found = upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.23.0")
    (runtime,) = [f for f in found if f.kind == "runtime"]
    assert not runtime.blocking
    assert runtime.detail.startswith(
        "CANN 8.3.RC2 -> 9.1.0 comes with the image quay.io/ascend/vllm-ascend:v0.23.0: give it "
        "as ascend_runtime_image_tarball (or _image_registry); the host's CANN is left alone"
    )


def test_the_advisor_names_the_defects_a_move_fixes_and_brings(tmp_path: Path) -> None:
    every = hosts_vars(ascend_example(tmp_path))
    found = {f.what: f.detail for f in upgrade.advise_host("npu-01", every["npu-01"],
                                                          "ascend-vllm-0.13.0") if f.kind == "defect"}  # fmt: skip
    assert found["torch-npu-2.8.0-memory-leak"].startswith("fixed by the move: ")
    assert found["host-memory-leak-0.13"].startswith("brought by the move: ")
    assert "dp-execute-model-timeout" not in found  # on both stacks


def test_a_stack_workaround_gives_every_node_of_a_group_the_same_env(tmp_path: Path) -> None:
    from acceldeploy.serving.hostplan import host_launches
    from acceldeploy.serving.selection import every_host

    every = every_host(str(REPO / "inventory/examples/ascend-910b-2node"))
    for host in ("npu-01", "npu-02"):
        moved = {**every[host], "acceldeploy_stack": "ascend-vllm-0.23.0"}
        launches = host_launches(moved)
        for launch in launches:
            assert launch.env["HCCL_CONNECT_TIMEOUT"] == "900"
            # vllm-ascend 0.23.0 raises it itself (its platform.py): the roles do not set it
            assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in launch.env
        for launch in host_launches({**every[host], "acceldeploy_stack": "ascend-vllm-0.13.0"}):
            assert launch.env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "3000"
    single = hosts_vars(str(REPO / "inventory/examples/ascend-910b"))["npu-01"]
    (launch,) = host_launches({**single, "acceldeploy_stack": "ascend-vllm-0.23.0"})
    assert "HCCL_CONNECT_TIMEOUT" not in launch.env  # a service on one host has no group


# --------------------------------------------------------------------------------------------
# --read-hosts: what the host holds, read by the first contact's probe (here, recorded output)


def reader(stdout: str, seen: list[str]) -> upgrade.HostReader:
    def read(host: str, hostvars: Mapping[str, Any], script: str) -> str:
        seen.append(script)
        return stdout

    return read


def test_read_hosts_judges_what_the_host_holds_against_the_target(tmp_path: Path) -> None:
    from test_stacklock import ascend_stdout

    every = hosts_vars(ascend_example(tmp_path))
    scripts: list[str] = []
    found = upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.13.0",
                                reader(ascend_stdout(), scripts))  # fmt: skip
    (script,) = scripts
    assert "/usr/local/Ascend/driver/version.info" in script and "ascend_toolkit_install" in script
    read = {f.what: f for f in found if f.kind == "installed"}
    assert "driver 24.1.rc3" in read["read from the host"].detail
    assert "cann 8.3.RC2" in read["read from the host"].detail
    (cann,) = [f for f in found if f.kind == "runtime"]
    assert cann.blocking and cann.detail.startswith("CANN 8.3.RC2 -> 8.5.0: ")
    # the host holds the target's CANN already: nothing to install, nothing blocks on it
    found = upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.13.0",
                                reader(ascend_stdout(cann="8.5.0"), []))  # fmt: skip
    (cann,) = [f for f in found if f.kind == "runtime"]
    assert not cann.blocking and cann.detail == "CANN 8.5.0 is on the host already"


def test_read_hosts_blocks_on_what_the_runtime_gate_would_refuse(tmp_path: Path) -> None:
    from test_stacklock import ascend_stdout

    every = hosts_vars(ascend_example(tmp_path))
    found = upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.13.0",
                                reader(ascend_stdout(driver=None), []))  # fmt: skip
    gate = [f for f in found if f.what == "runtime check"]
    assert gate and all(f.blocking for f in gate)
    assert any("Ascend driver not installed" in f.detail for f in gate), gate


def test_read_hosts_says_why_a_host_was_not_read(tmp_path: Path) -> None:
    def unreachable(host: str, hostvars: Mapping[str, Any], script: str) -> str:
        raise AcceldeployError("ssh 127.0.0.1:9: Connection refused")

    every = hosts_vars(ascend_example(tmp_path))
    found = upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.13.0", unreachable)
    (read,) = [f for f in found if f.kind == "installed"]
    assert read.blocking and read.detail == "not read: ssh 127.0.0.1:9: Connection refused"


def test_without_read_hosts_no_host_is_read(tmp_path: Path) -> None:
    every = hosts_vars(ascend_example(tmp_path))
    found = upgrade.advise_host("npu-01", every["npu-01"], "ascend-vllm-0.13.0")
    assert not [f for f in found if f.kind == "installed"]


def test_a_role_default_naming_other_variables_is_filled_in() -> None:
    from acceldeploy.inventory import roledefaults

    assert roledefaults.rendered({}, "ascend_runtime_driver_info") == (
        "/usr/local/Ascend/driver/version.info"
    )
    moved = {"ascend_runtime_home": "/opt/Ascend"}
    assert roledefaults.rendered(moved, "ascend_runtime_toolkit_info")[0].startswith(
        "/opt/Ascend/ascend-toolkit/latest/"
    )


def test_a_probe_whose_last_command_failed_was_still_read() -> None:
    from acceldeploy.siteinit.probe import unreachable

    # the probe's exit status is its last command's (a missing tool): the host was read
    assert unreachable(127, "== os-release\nID=debian\n", "") is None
    assert unreachable(255, "", "ssh: connect to host 127.0.0.1 port 9: refused\n") == (
        "ssh: connect to host 127.0.0.1 port 9: refused"
    )
    assert unreachable(0, "", "") == "ssh exited 0"
