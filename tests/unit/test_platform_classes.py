"""acceldeploy.platforms: one class per platform, found by name; each read on recorded real
device-tool output (tests/data/recorded), and through the modules that ask it (bench, verify,
the stack matrix, the stack lock, the bundle)."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from acceldeploy import runtimes
from acceldeploy.bench import series
from acceldeploy.bundle import hostclass
from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import stackmatrix, stacks
from acceldeploy.planner.platforms import get_platform
from acceldeploy.platforms import PLATFORMS, for_name, known_names
from acceldeploy.platforms.ascend.platform import AscendPlatform
from acceldeploy.platforms.cpu.platform import CpuPlatform
from acceldeploy.platforms.gaudi.platform import GaudiPlatform
from acceldeploy.runtimes import stacklock
from acceldeploy.verify import hoststate, memprobe

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "recorded"
NPU_910B1 = (RECORDED / "npu-smi-info-910b1-x8.txt").read_text()
NPU_310P_DUO = (RECORDED / "npu-smi-info-310p3-duo.txt").read_text()
HL_GAUDI2 = (RECORDED / "hl-smi-gaudi2-hl225-x8.txt").read_text()


# ---------------------------------------------------------------------------- the registry


def test_each_name_finds_its_class() -> None:
    assert known_names() == ("ascend", "gaudi", "cpu")
    assert isinstance(for_name("ascend"), AscendPlatform)
    assert isinstance(for_name("gaudi"), GaudiPlatform)
    assert isinstance(for_name("cpu"), CpuPlatform)
    assert all(for_name(p.name) is p for p in PLATFORMS)


@pytest.mark.parametrize("name", ["cuda", "", "Ascend"])
def test_an_unknown_name_is_refused_naming_the_variable_and_the_known_names(name: str) -> None:
    with pytest.raises(AcceldeployError) as refused:
        for_name(name)
    message = str(refused.value)
    assert f"acceldeploy_platform {name!r} is unknown" in message
    assert "ascend, gaudi, cpu" in message


def test_every_profile_of_the_data_has_a_class_and_every_class_a_profile() -> None:
    assert set(load("platforms")) == set(known_names())


def test_a_platform_s_behaviour_is_its_class() -> None:
    for name in known_names():
        assert get_platform(name).behaviour is for_name(name)


def test_every_runtime_role_is_a_role_with_a_version_check() -> None:
    roles = {p.runtime_role for p in PLATFORMS if p.runtime_role}
    assert roles == {"ascend_runtime", "gaudi_runtime"} == set(stacklock.VERSION_CHECKS)
    assert all((ROOT / "roles" / role).is_dir() for role in roles)
    assert CpuPlatform.runtime_role is None


# ---------------------------------------------------------------------------- the devices


def test_ascend_reads_every_npu_of_npu_smi_info_with_its_hbm() -> None:
    ascend = for_name("ascend")
    assert ascend.smi_command == ("npu-smi", "info") and ascend.smi == "npu-smi"
    readings = ascend.read_devices(NPU_910B1)
    assert [r.index for r in readings] == list(range(8))
    assert [r.label for r in readings][:2] == ["npu0", "npu1"]
    assert (readings[0].used_mib, readings[0].health) == (3395, "OK")


def test_ascend_reads_both_chips_of_a_310p_duo_npu_and_the_critical_one() -> None:
    readings = for_name("ascend").read_devices(NPU_310P_DUO)
    assert [r.index for r in readings] == [1, 1, 2, 2, 4, 4, 5, 5]
    assert all(r.used_mib is None for r in readings)  # the 310P has no HBM column
    assert [r.health for r in readings].count("OK") == 7


def test_gaudi_reads_every_hpu_of_hl_smi_healthy() -> None:
    gaudi = for_name("gaudi")
    assert gaudi.smi_command == ("hl-smi",) and gaudi.smi == "hl-smi"
    readings = gaudi.read_devices(HL_GAUDI2)
    assert [r.label for r in readings] == [f"hpu{i}" for i in range(8)]
    assert all(r.health == "OK" and r.used_mib is not None for r in readings)


def test_cpu_has_no_device_tool_and_no_devices() -> None:
    cpu = for_name("cpu")
    assert cpu.smi_command == () and cpu.smi is None
    assert cpu.read_devices("anything") == []


def test_a_device_tool_s_other_output_is_refused() -> None:
    with pytest.raises(AcceldeployError, match="not npu-smi info output"):
        for_name("ascend").read_devices(HL_GAUDI2)
    with pytest.raises(AcceldeployError, match="not hl-smi output"):
        for_name("gaudi").read_devices(NPU_910B1)


def test_the_readiness_gate_gets_npus_on_ascend_hpus_on_gaudi_nothing_on_cpu() -> None:
    assert for_name("ascend").readiness_devices([2, 3]) == {"npus": [2, 3]}
    assert for_name("gaudi").readiness_devices([2, 3]) == {"hpus": ["2", "3"]}
    assert for_name("cpu").readiness_devices([]) == {}


# ---------------------------------------------------------------------------- the stacks


def test_every_platform_s_stacks_set_its_keys() -> None:
    for entry in stacks.load_stacks().values():
        keys = for_name(entry["platform"]).stack_keys
        assert all(entry.get(key) not in (None, "") for key in keys), entry["name"]
    for platform in PLATFORMS:
        assert {"vllm", "engine_options"} <= set(platform.stack_keys)


def test_a_stack_of_an_unknown_platform_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "stacks.yml"
    file.write_text("stacks:\n  cuda-1:\n    platform: cuda\n    vllm: '0.12.0'\n")
    with pytest.raises(AcceldeployError, match="needs a platform, one of ascend, gaudi, cpu"):
        stacks.load_stacks(file)


def entry(platform: str, **keys: Any) -> dict[str, Any]:
    return {"name": f"{platform}-x", "platform": platform, "python": "3.11", **keys}


def test_the_matrix_cells_each_platform_writes_its_own_way() -> None:
    ascend, gaudi, cpu = for_name("ascend"), for_name("gaudi"), for_name("cpu")
    npu = entry("ascend", torch="2.8.0", torch_npu="2.8.0", requires_python=">=3.10")
    assert ascend.torch_cell(npu) == "2.8.0"
    assert ascend.device_torch_cell(npu) == "torch-npu 2.8.0"
    assert ascend.python_cell(npu) == "3.11 (>=3.10)"
    assert ascend.bucketing_cell(npu) == "-"
    hpu = entry("gaudi", torch="2.7.1", bucketing={"prompt_len": "VLLM_PROMPT_LEN_BUCKET"})
    assert gaudi.torch_cell(hpu) == "-"
    assert gaudi.device_torch_cell(hpu) == "Habana PyTorch 2.7.1 (the image's)"
    assert gaudi.python_cell(hpu) == "3.11 (the image's)"
    assert gaudi.bucketing_cell(hpu) == "VLLM_PROMPT_LEN_BUCKET_*"
    assert gaudi.bucketing_cell(entry("gaudi")) == "VLLM_PROMPT_SEQ_BUCKET_*"
    lab = entry("cpu", torch=None)
    assert (cpu.torch_cell(lab), cpu.device_torch_cell(lab), cpu.python_cell(lab)) == (
        "-",
        "-",
        "3.11",
    )


def test_the_matrix_rows_take_the_platform_s_cells() -> None:
    rows = {row["platform"]: row for row in stackmatrix.matrix() if row["default"]}
    assert rows["gaudi"]["torch"] == "-" and rows["gaudi"]["python"].endswith("(the image's)")
    assert rows["ascend"]["device_torch"].startswith("torch-npu ")
    assert rows["ascend"]["bucketing"] == rows["cpu"]["bucketing"] == "-"
    assert rows["cpu"]["device_torch"] == "-"


def test_only_cpu_stacks_are_wheel_locks_the_bundle_collects_and_the_wheelhouse_serves() -> None:
    assert [p.name for p in PLATFORMS if p.wheel_lock] == ["cpu"]
    classes = {
        name: hostclass.HostClass(name, f"{name}-x", "3.11", "x86_64", 36, "3.11")
        for name in known_names()
    }
    assert [name for name, klass in classes.items() if klass.collects_stack] == ["cpu"]
    # python_env_no_index's default (roles/python_env/defaults/main.yml)
    assert [name for name in known_names() if runtimes.wheelhouse_only(name)] == ["cpu"]
    assert not runtimes.wheelhouse_only("") and not runtimes.wheelhouse_only("tpu")


# ---------------------------------------------------------------------------- their users


def test_bench_reads_device_memory_through_the_class() -> None:
    readings = for_name("ascend").read_devices(NPU_910B1)
    found = series.device_memory("ascend", [0, 1], {"raw": NPU_910B1})
    assert found == {r.label: r.used_mib for r in readings[:2]} and found["npu0"] == 3395.0
    assert set(series.device_memory("gaudi", [7], {"raw": HL_GAUDI2})) == {"hpu7"}
    assert series.device_memory("cpu", [], {}) == {}


class FakeConnection:
    def __init__(self, stdout: str) -> None:
        self.stdout = stdout
        self.commands: list[str] = []

    def run(self, command: str, **_: Any) -> SimpleNamespace:
        self.commands.append(command)
        return SimpleNamespace(stdout=self.stdout)


def test_verify_s_memory_probe_runs_the_platform_s_tool_and_sums_its_devices() -> None:
    ascend = FakeConnection(NPU_910B1)
    launch = SimpleNamespace(platform="ascend", devices=[0, 1], name="vllm-a")
    readings = for_name("ascend").read_devices(NPU_910B1)
    want = float(sum(r.used_mib or 0 for r in readings[:2]))
    assert memprobe.memory_mib(ascend, launch) == want
    assert ascend.commands == ["npu-smi info"]
    gaudi = FakeConnection(HL_GAUDI2)
    memprobe.memory_mib(gaudi, SimpleNamespace(platform="gaudi", devices=[0], name="vllm-g"))
    assert gaudi.commands == ["hl-smi"]
    cpu = FakeConnection(str(3 << 20))
    assert memprobe.memory_mib(cpu, SimpleNamespace(platform="cpu", devices=[], name="v")) == 3.0
    assert "v.service" in cpu.commands[0]


def test_verify_s_device_check_on_gaudi_names_a_missing_hpu() -> None:
    smi = {"hl-smi": {"rc": 0, "out": HL_GAUDI2}}
    (ok,) = hoststate.judge_devices("hpu-01", "gaudi", smi, [SimpleNamespace(devices=[0, 7])])
    assert ok.status == "pass" and ok.detail.startswith("8 visible")
    (bad,) = hoststate.judge_devices("hpu-01", "gaudi", smi, [SimpleNamespace(devices=[9])])
    assert bad.status == "fail" and "{9: 'missing'}" in bad.detail
    (skip,) = hoststate.judge_devices("lab1", "cpu", {}, [])
    assert skip.status == "skip"


def test_the_playbooks_ask_the_class_which_role_gates_the_runtime() -> None:
    """runtime.yml and preflight.yml choose the runtime role through this filter, not by
    comparing platform names."""
    filters = runpy.run_path(str(ROOT / "plugins/filter/acceldeploy_filters.py"))
    acceldeploy_runtime_role = filters["acceldeploy_runtime_role"]
    assert acceldeploy_runtime_role("ascend") == "ascend_runtime"
    assert acceldeploy_runtime_role("gaudi") == "gaudi_runtime"
    assert acceldeploy_runtime_role("cpu") == acceldeploy_runtime_role("") == ""
    with pytest.raises(AcceldeployError, match="acceldeploy_platform 'tpu' is unknown"):
        acceldeploy_runtime_role("tpu")


@pytest.mark.parametrize(
    ("run_tags", "skip_tags", "ascend", "gaudi"),
    [
        (["all"], [], "ascend_runtime", "gaudi_runtime"),
        (["ascend_runtime"], [], "ascend_runtime", ""),
        (["gaudi_runtime", "python_env"], [], "", "gaudi_runtime"),
        (["all"], ["gaudi_runtime"], "ascend_runtime", ""),
        (["python_env"], [], "", ""),
        (["ascend_runtime_cann"], [], "", ""),  # a play tagged ascend_runtime did not run
        (["all"], ["all"], "", ""),
    ],
)
def test_runtime_yml_s_one_play_runs_a_role_where_a_play_tagged_with_its_name_would(
    run_tags: list[str], skip_tags: list[str], ascend: str, gaudi: str
) -> None:
    """With the run's tags the filter names the role only where --tags / --skip-tags select a
    play tagged with its name, as runtime.yml's play per role was (its one play includes it)."""
    filters = runpy.run_path(str(ROOT / "plugins/filter/acceldeploy_filters.py"))
    acceldeploy_runtime_role = filters["acceldeploy_runtime_role"]
    assert acceldeploy_runtime_role("ascend", run_tags, skip_tags) == ascend
    assert acceldeploy_runtime_role("gaudi", run_tags, skip_tags) == gaudi
    assert acceldeploy_runtime_role("cpu", run_tags, skip_tags) == ""


def test_preflight_checks_the_runtime_role_the_class_names() -> None:
    action = runpy.run_path(str(ROOT / "plugins/action/acceldeploy_preflight.py"))

    def roles(platform: str) -> list[str]:
        return [step.role for step in action["serving_steps"]({"acceldeploy_platform": platform})]

    every = ["vllm_service", "host_tuning", "python_env", "model_weights"]
    assert roles("ascend") == [*every[:2], "ascend_runtime", *every[2:]]
    assert roles("gaudi") == [*every[:2], "gaudi_runtime", *every[2:]]
    assert roles("cpu") == roles("") == roles("tpu") == every
