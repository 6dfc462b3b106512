"""The launcher strategies (serving/launchers.py): chosen once per platform, each owning what
differs between the host env and Gaudi's container. The rendered units themselves are golden
in test_unit_render.py, test_render.py and test_cluster.py."""

import dataclasses
import re
from pathlib import Path

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.planner.platforms import get_platform, platform_names
from acceldeploy.serving.hostplan import host_plan
from acceldeploy.serving.launchers import (
    ContainerLauncher,
    VenvLauncher,
    launcher_for,
    numa_binding,
)
from acceldeploy.serving.values import UnitOptions

ROOT = Path(__file__).resolve().parents[2]
ASCEND = (str(ROOT / "inventory/examples/ascend-910b"), "npu-01")
GAUDI = (str(ROOT / "inventory/examples/gaudi2"), "hpu-01")
TOPOLOGY = ({"device": 0, "numa": 1, "cpus": "48-95"}, {"device": 2, "numa": 1, "cpus": "48-95"})


def test_each_platform_has_one_launcher():
    chosen = {name: type(launcher_for(get_platform(name))) for name in platform_names()}
    assert chosen == {"ascend": VenvLauncher, "cpu": VenvLauncher, "gaudi": ContainerLauncher}


def test_only_the_launcher_choice_asks_whether_the_platform_is_a_container():
    package = ROOT / "tools/acceldeploy"
    asked = [
        f"{path.relative_to(package)}:{number}"
        for folder in ("serving", "planner")
        for path in sorted((package / folder).glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.container\b", line)
    ]
    assert len(asked) == 1 and asked[0].startswith("serving/launchers.py:"), asked


def _plan_and_launch(where):
    plan = host_plan(host_vars(*where))
    (launch,) = plan.launches()
    return plan, launcher_for(plan.platform), launch


def test_the_venv_launcher_runs_the_host_env():
    plan, launcher, launch = _plan_and_launch(ASCEND)
    prefix = plan.context.env_prefix
    assert isinstance(launcher, VenvLauncher) and prefix
    assert launcher.serve_command(prefix) == (f"{prefix}/bin/vllm", "serve")
    assert launcher.ray_command(prefix) == f"{prefix}/bin/ray"
    with pytest.raises(AcceldeployError, match="no Python environment path"):
        launcher.serve_command(None)
    assert launcher.tuning(None, 0, 0, {}, None, "") == ({}, {})
    opts = UnitOptions(topology=TOPOLOGY)
    assert launcher.exec_argv(launch, opts, "/models", "/s", "/c") == launch.argv
    assert launcher.ray_wait_prefix(launch, opts, "/h", "/s") == [f"{prefix}/bin/python"]
    assert launcher.cleanup(launch.name) == []
    assert launcher.hardening(launch) == {
        "device_allow": launch.device_paths,
        "ip_allow": ["localhost"],
    }
    check = launcher.argcheck(launch)
    assert check is not None and f"{prefix}/bin/python" in check
    on_one_node = dataclasses.replace(launch, devices=[0, 2])
    assert launcher.unit_numa(on_one_node, TOPOLOGY) == ("48-95", 1)


def test_the_container_launcher_runs_the_image():
    plan, launcher, launch = _plan_and_launch(GAUDI)
    assert isinstance(launcher, ContainerLauncher) and plan.context.env_prefix is None
    assert launcher.env_prefix({}, None) is None
    assert launcher.serve_command(None) == ("vllm", "serve")
    assert launcher.ray_command(None) == "ray"
    assert launch.argv[:2] == ["vllm", "serve"]
    assert "VLLM_PROMPT_SEQ_BUCKET_MAX" in launch.env  # the bucketing hook ran
    on_one_node = dataclasses.replace(launch, devices=[0, 2])
    opts = UnitOptions(topology=TOPOLOGY, gaudi_image="example/img:1")
    argv = launcher.exec_argv(on_one_node, opts, "/models", "/s", "/c")
    assert argv[:2] == ["/usr/bin/docker", "run"] and argv[-len(launch.argv) - 1 :] == [
        "example/img:1",
        *launch.argv,
    ]
    # pinned by docker run, not by the unit
    assert "--cpuset-cpus=48-95" in argv and "--cpuset-mems=1" in argv
    assert numa_binding(on_one_node, TOPOLOGY) == ("48-95", 1)
    assert launcher.unit_numa(on_one_node, TOPOLOGY) is None
    wait = launcher.ray_wait_prefix(launch, opts, "/h", "/s")
    assert wait[:2] == ["/usr/bin/docker", "run"] and wait[-2:] == ["example/img:1", "python3"]
    assert launcher.cleanup(launch.name) == [f"-/usr/bin/docker rm -f acceldeploy-{launch.name}"]
    assert launcher.hardening(launch) == {"device_allow": [], "ip_allow": []}
    assert launcher.argcheck(launch) is None
