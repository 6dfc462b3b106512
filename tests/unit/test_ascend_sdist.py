"""A stack whose vllm-ascend is published as an sdist only (ascend-vllm-0.23.0.post1): built
on the host from the package index's sdist, for one chip (SOC_VERSION), its inputs checked
before anything is built. No CANN exists here: the plan is checked, not run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import stacks
from acceldeploy.runtimes import python_env

STACK = "ascend-vllm-0.23.0.post1"


def plan(**options: Any) -> dict[str, Any]:
    return python_env.python_env_plan(
        {"platform": "ascend", "stack": STACK, "install_from": "wheels", **options}
    )


def named(steps: list[dict[str, Any]]) -> list[str]:
    return [s["name"] for s in steps]


def test_the_stack_is_the_newest_final_and_builds_from_its_sdist() -> None:
    entry = stacks.host_stack("ascend", STACK)
    assert entry["vllm_ascend"] == "0.23.0.post1"
    assert python_env.sdist_names(entry) == [python_env.ASCEND_KERNELS]
    assert (entry["cann"], entry["torch_npu"]) == ("9.1.0", "2.10.0.post4")
    assert "a3b9f4a5dd7aa50c37e03d1f35937c4ae5aeacc49b734cac74d59ce5757738e1" in str(
        entry["sources"]["package"]
    )
    assert not python_env.sdist_names(stacks.host_stack("ascend", "ascend-vllm-0.23.0"))


def test_the_inputs_are_checked_first_then_vllm_ascend_is_built_for_the_chip() -> None:
    built = plan(soc_version="ascend910b1")
    steps = built["steps"]
    assert steps[0]["name"].startswith("check the source build's inputs")
    check = steps[0]["command"]
    assert "set_env.sh" in check and "ASCEND_HOME_PATH" in check
    assert all(tool in check for tool in python_env.SOURCE_BUILD_TOOLS)
    assert steps[1]["name"] == "create the conda"
    (build,) = [s for s in steps if "from the sdist" in s["name"]]
    assert build["env"]["SOC_VERSION"] == "ascend910b1"
    assert " wheel " in build["command"] and "--no-binary vllm-ascend" in build["command"]
    assert f"-w {built['staging']}/{python_env.BUILT_WHEELS_DIR}" in build["command"]
    # the install step takes vllm-ascend from the wheel built here, the rest from the sources
    install = steps[steps.index(build) + 1]
    assert f"--find-links {built['staging']}/{python_env.BUILT_WHEELS_DIR}" in install["command"]
    assert install["command"].endswith("vllm-ascend==0.23.0.post1")
    assert "vllm-ascend" not in built["requirements_text"]
    assert built["from_sdist"] == ["vllm-ascend==0.23.0.post1"]
    assert built["expect"]["vllm-ascend"] == "0.23.0.post1"
    # another chip is another build: the fan-out never shares it between them
    assert plan(soc_version="ascend910b3")["key"] != built["key"]


def test_from_source_the_sdist_replaces_the_git_checkout() -> None:
    steps = plan(soc_version="ascend910b1", install_from="source")["steps"]
    assert "clone vllm-ascend v0.23.0.post1" not in named(steps)
    (build,) = [s for s in steps if "from the sdist" in s["name"]]
    assert build["command"].endswith("vllm-ascend==0.23.0.post1")
    assert "install vllm-ascend (the wheel built here)" in named(steps)
    assert "clone vllm v0.23.0" in named(steps)


def test_the_chip_comes_from_the_hosts_npus_when_not_given() -> None:
    built = plan(npu_names=["910B1"] * 8)
    (build,) = [s for s in built["steps"] if "from the sdist" in s["name"]]
    assert build["env"]["SOC_VERSION"] == "ascend910b1"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({}, "python_env_soc_version is empty and no NPU is recorded yet"),
        ({"npu_names": ["910B1", "910B3"]}, "npu-smi names 910b1, 910b3"),
        ({"soc_version": "ascend310p1"}, "python_env_soc_version 'ascend310p1' is not a chip"),
        ({"soc_version": "ascend910b3", "npu_names": ["910B1"]}, "set it to ascend910b1"),
    ],
)
def test_a_build_without_its_chip_is_refused_naming_the_variable(
    options: dict[str, Any], says: str
) -> None:
    with pytest.raises(AcceldeployError, match=says):
        plan(**options)


def test_stacks_with_wheels_plan_as_before() -> None:
    before = python_env.python_env_plan({"platform": "ascend", "install_from": "wheels"})
    assert not before["steps"][0]["name"].startswith("check the source build's inputs")
    assert all("SOC_VERSION" not in s["env"] for s in before["steps"])


def test_the_sdist_stack_has_no_image_to_run() -> None:
    with pytest.raises(AcceldeployError, match=f"stack {STACK} names no image"):
        plan(manager="container", soc_version="ascend910b1")


def test_the_advisor_says_the_move_builds_from_the_sdist(tmp_path: Any) -> None:
    from acceldeploy import upgrade
    from acceldeploy.inventory.hostvars import hosts_vars

    root = Path(__file__).resolve().parents[2]
    every = hosts_vars(str(root / "inventory/examples/ascend-910b"))
    found = upgrade.advise_host("npu-01", every["npu-01"], STACK)
    (build,) = [f for f in found if f.what == "source build"]
    assert not build.blocking and "published as an sdist only" in build.detail
    assert "gcc, g++, make" in build.detail
    fixed = {f.what for f in found if f.kind == "defect" and "fixed by the move" in f.detail}
    assert "torch-npu-2.8.0-memory-leak" in fixed
