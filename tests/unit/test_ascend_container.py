"""Ascend in vllm-ascend's release image (python_env_manager: container): the per-host choice,
the rendered unit and argv, the python_env record, the runtime check that reads Docker and the
image instead of the host's CANN. No NPU or image exists here: the unit is checked by
systemd-analyze verify and the argv by the recorded `vllm serve` options of the image's vLLM."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from test_runtimes import OPTIONS, ascend_probe
from unit_verify import verify_rendered

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import host_vars, hosts_vars
from acceldeploy.planner import stacks
from acceldeploy.planner.engineopts import platform_engine
from acceldeploy.planner.platforms import get_platform
from acceldeploy.platforms.ascend import runtime as ascend
from acceldeploy.runtimes import python_env
from acceldeploy.serving import hostplan
from acceldeploy.serving.launchers import ContainerLauncher, VenvLauncher, launcher_for
from acceldeploy.serving.unit import build
from acceldeploy.serving.values import UnitOptions

ROOT = Path(__file__).resolve().parents[2]
ONE = (str(ROOT / "inventory/examples/ascend-910b"), "npu-01")
TWO = (str(ROOT / "inventory/examples/ascend-910b-2node"), "npu-01")
IMAGE = "quay.io/ascend/vllm-ascend:v0.12.0rc1"
SHARED_NODES = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]


def in_image(where: tuple[str, str], **more: Any) -> dict[str, Any]:
    return {**host_vars(*where), "python_env_manager": "container", **more}


def test_how_vllm_runs_is_the_hosts_choice() -> None:
    assert type(launcher_for(get_platform("ascend"))) is VenvLauncher
    chosen = get_platform("ascend", None, "", "container")
    assert type(launcher_for(chosen)) is ContainerLauncher
    assert chosen.image == IMAGE and "docker" in chosen.groups
    assert "docker" not in get_platform("ascend").groups
    for stack in ("ascend-vllm-0.13.0", "ascend-vllm-0.23.0"):
        tag = stack.removeprefix("ascend-vllm-")
        assert get_platform("ascend", None, stack, "container").image.endswith(f":v{tag}")
    with pytest.raises(AcceldeployError, match="container does not fit platform cpu: stack "):
        get_platform("cpu", None, "", "container")
    with pytest.raises(AcceldeployError, match="venv does not fit platform gaudi"):
        get_platform("gaudi", None, "", "venv")


def test_the_unit_runs_the_release_image_with_the_conda_paths_flags_and_env() -> None:
    conda = hostplan.host_plan(host_vars(*ONE))
    plan = hostplan.host_plan(in_image(ONE))
    (before,), (launch,) = conda.launches(), plan.launches()
    assert launch.argv[:2] == ["vllm", "serve"] and launch.argv[2:] == before.argv[2:]
    assert launch.env == before.env and launch.env_scripts == []
    (unit,) = plan.units()
    argv = unit.exec_argv
    assert argv[:2] == ["/usr/bin/docker", "run"]
    devices = [a.removeprefix("--device=") for a in argv if a.startswith("--device=")]
    assert devices == [*SHARED_NODES, "/dev/davinci2", "/dev/davinci3"]
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/:ro" in mounts
    assert "/models:/models:ro" in mounts
    assert f"{unit.cache_dir}:{unit.cache_dir}:rw" in mounts
    passed = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert passed == sorted({*launch.env, "XDG_CACHE_HOME"})
    assert not any("=" in name for name in passed)  # values come from the unit, by name
    image_at = argv.index(IMAGE)
    inner = argv[image_at + 1 :]
    scripts = stacks.stack("ascend")["env_scripts"]
    assert inner[:2] == ["/bin/bash", "-c"] and all(s in inner[2] for s in scripts)
    assert inner[3:] == launch.argv
    assert unit.env_scripts == [] and "docker" in unit.groups
    assert unit.argcheck is None  # vLLM is in the image: checked below against its options


def test_every_rendered_flag_is_one_the_images_vllm_parser_knows() -> None:
    plan = hostplan.host_plan(in_image(ONE))
    (launch,) = plan.launches()
    options = platform_engine(plan.platform).options
    flags = [a.split("=", 1)[0] for a in launch.argv if a.startswith("--")]
    assert flags and [f for f in flags if f not in options] == []


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    plan = hostplan.host_plan(in_image(ONE))
    (launch,) = plan.launches()
    unit = build(launch, plan.platform, plan.context.models_root,
                 UnitOptions(launcher_dir=str(tmp_path)))  # fmt: skip
    verify_rendered(unit, tmp_path)


def test_a_ray_node_in_the_image_gets_its_devices() -> None:
    every = hostplan.with_node_ips(hosts_vars(TWO[0]))
    plan = hostplan.host_plan({**every[TWO[1]], "python_env_manager": "container"})
    (node,) = plan.node_units()
    devices = [a for a in node.exec_argv if a.startswith("--device=")]
    assert devices[:3] == [f"--device={n}" for n in SHARED_NODES] and len(devices) > 3
    assert node.exec_argv[node.exec_argv.index(IMAGE) + 1 :][:2] == ["/bin/bash", "-c"]
    assert node.env_scripts == []


def test_python_env_records_the_image_and_names_the_role_that_loads_it() -> None:
    plan = python_env.python_env_plan({"platform": "ascend", "manager": "container"})
    assert plan["manager"] == "container" and plan["image"] == IMAGE
    assert plan["run_argv"][-1] == IMAGE and "--shm-size=1g" in plan["run_argv"]
    assert plan["steps"] == [] and plan["env_scripts"] == []
    assert "ascend_runtime_image_tarball" in plan["image_missing"]
    assert (
        "gaudi_runtime_image_tarball"
        in python_env.python_env_plan({"platform": "gaudi"})["image_missing"]
    )


CONTAINER = {**OPTIONS, "manager": "container"}


def container_options(**more: Any) -> dict[str, Any]:
    return ascend.ascend_options({**CONTAINER, **more}, stacks.stack("ascend"))


def with_docker(probe: dict[str, Any], image_rc: int = 1) -> dict[str, Any]:
    commands = {
        "docker_version": {"found": True, "rc": 0, "stdout": "26.1.5", "stderr": ""},
        "image_inspect": {"found": True, "rc": image_rc, "stdout": "sha256:abc" if image_rc == 0
                          else "", "stderr": ""},
    }  # fmt: skip
    return {**probe, "commands": {**probe["commands"], **commands}}


def test_the_gate_reads_docker_and_the_image_not_the_hosts_cann() -> None:
    options = container_options(image_tarball="/srv/vllm-ascend-v0.12.0rc1.tar")
    assert options["container"] and options["image"] == IMAGE
    assert set(options["image_probe"]) == {"docker_version", "image_inspect"}
    no_cann = ascend_probe(cann=None)
    no_cann["paths"] = {p: e for p, e in no_cann["paths"].items() if not p.endswith(".sh")}
    verdict = ascend.ascend_check(with_docker(no_cann), stacks.stack("ascend"), options)
    assert verdict["ok"], verdict["errors"]
    assert verdict["install"] == [] and verdict["env_scripts"] == []
    assert verdict["image"]["source"] == "tarball"
    assert verdict["image"]["commands"] == [
        ["docker", "load", "--input", "/srv/vllm-ascend-v0.12.0rc1.tar"]
    ]
    fact = ascend.ascend_fact(verdict)
    assert fact["image"] == IMAGE and "cann" in fact
    # the conda host's record has no image keys: it is unchanged
    conda = ascend.ascend_check(ascend_probe(), stacks.stack("ascend"),
                               ascend.ascend_options(OPTIONS, stacks.stack("ascend")))  # fmt: skip
    assert "image" not in ascend.ascend_fact(conda)


def test_the_gate_still_judges_the_driver_against_the_images_cann() -> None:
    stack = {**stacks.stack("ascend"), "cann_compatible_drivers": ["V100R001C21", "V100R001C23"]}
    options = {**container_options(), "check_firmware": False}
    verdict = ascend.ascend_check(with_docker(ascend_probe(cann=None), 0), stack, options)
    assert "driver 24.1.rc3 (V100R001C19) is not one CANN 8.3.RC2 supports" in verdict["message"]


def test_the_gate_refuses_without_docker_or_a_source_for_the_image() -> None:
    probe = ascend_probe(cann=None)
    verdict = ascend.ascend_check(probe, stacks.stack("ascend"), container_options())
    assert any(e.startswith("docker not found") for e in verdict["errors"]), verdict["errors"]
    verdict = ascend.ascend_check(with_docker(probe), stacks.stack("ascend"), container_options())
    (error,) = verdict["errors"]
    assert "ascend_runtime_image_tarball" in error and "ascend_runtime_image_registry" in error
    present = ascend.ascend_check(
        with_docker(probe, 0), stacks.stack("ascend"), container_options()
    )
    assert present["ok"] and present["image"]["source"] == "present"
    assert present["image"]["commands"] == [] and present["detected"]["image_id"] == "sha256:abc"


def test_an_image_from_an_internal_url_is_downloaded_once_and_checked() -> None:
    options = container_options(
        image_tarball="http://mirror.rack/images/vllm-ascend.tar?sig=1",
        image_tarball_checksum="ab" * 32,
        download_dir="/var/cache/acceldeploy/ascend",
    )
    verdict = ascend.ascend_check(with_docker(ascend_probe(cann=None)), stacks.stack("ascend"),
                                 options)  # fmt: skip
    assert verdict["image"]["download"] == {
        "url": "http://mirror.rack/images/vllm-ascend.tar?sig=1",
        "dest": "/var/cache/acceldeploy/ascend/vllm-ascend.tar",
        "checksum": "ab" * 32,
    }
    assert verdict["image"]["commands"] == [
        ["docker", "load", "--input", "/var/cache/acceldeploy/ascend/vllm-ascend.tar"]
    ]


@pytest.mark.parametrize(
    ("more", "named"),
    [
        ({"image_registry": "https://registry.rack/"}, "ascend_runtime_image_registry"),
        ({"image_tarball": "images/vllm.tar"}, "ascend_runtime_image_tarball"),
        ({"cann_install": True}, "set ascend_runtime_cann_install: false"),
    ],
)
def test_bad_image_inputs_are_refused_naming_the_variable(more: dict[str, Any], named: str) -> None:
    with pytest.raises(AcceldeployError, match=named):
        container_options(**more)


def test_the_advisor_names_the_image_only_where_the_host_runs_it(tmp_path: Path) -> None:
    from acceldeploy import upgrade

    conda = upgrade.advise_host("npu-01", host_vars(*ONE), "ascend-vllm-0.13.0")
    assert "container image" not in {f.what for f in conda}
    moved = upgrade.advise_host("npu-01", in_image(ONE), "ascend-vllm-0.13.0")
    (image,) = [f for f in moved if f.what == "container image"]
    assert image.detail == f"{IMAGE} -> quay.io/ascend/vllm-ascend:v0.13.0"
