"""acceldeploy.planner.stacks: versions/stacks.yml loaded and checked (one default per platform,
every stack's parts agreeing), the host's stack chosen by acceldeploy_stack, the cpu lock read;
and everything that depends on the stack reading the host's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_runtimes import OPTIONS, ascend_probe, gaudi_probe
from unit_verify import verify_rendered

from acceldeploy.bundle import hostclass
from acceldeploy.data_files import DATA_DIR
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import targets
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.planner import stackmatrix, stacks
from acceldeploy.planner.engineopts import platform_engine
from acceldeploy.planner.platforms import get_platform
from acceldeploy.platforms.ascend import runtime as ascend
from acceldeploy.platforms.gaudi import runtime as gaudi
from acceldeploy.runtimes import python_env
from acceldeploy.serving import gaudi_launch, hostplan
from acceldeploy.serving.unit import build
from acceldeploy.serving.values import UnitOptions

ROOT = Path(__file__).resolve().parents[2]
GAUDI = (str(ROOT / "inventory/examples/gaudi2"), "hpu-01")
ENGINE_0_13 = DATA_DIR / "engine-options" / "vllm-0.13.0.json"
DEFAULTS = {"ascend": "ascend-vllm-0.12.0rc1", "gaudi": "gaudi-fork-1.22", "cpu": "cpu-vllm-0.12.0"}


def write_stacks(tmp_path: Path, change: dict[str, dict[str, Any]]) -> Path:
    """versions/stacks.yml with some stacks' keys changed (None removes a key)."""
    data = yaml.safe_load(stacks.STACKS_FILE.read_text())
    for name, values in change.items():
        entry = {**data["stacks"].get(name, {}), **values}
        data["stacks"][name] = {k: v for k, v in entry.items() if v is not None}
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data))
    for lock in stacks.VERSIONS_DIR.glob("*.txt"):
        (tmp_path / lock.name).write_text(lock.read_text())
    return path


# --------------------------------------------------------------------------------------------
# The file


def test_every_stack_names_itself_its_platform_and_file() -> None:
    loaded = stacks.load_stacks()
    assert set(loaded) == {
        "ascend-vllm-0.12.0rc1", "ascend-vllm-0.13.0", "ascend-vllm-0.23.0",
        "ascend-vllm-0.23.0.post1", "gaudi-fork-1.22",
        "gaudi-vllm-0.13.0", "gaudi-vllm-0.26.0", "cpu-vllm-0.12.0", "cpu-vllm-0.13.0",
        "cpu-vllm-0.31.0", "cpu-vllm-0.32.0",
    }  # fmt: skip
    for name, entry in loaded.items():
        assert entry["name"] == name and entry["file"] == str(stacks.STACKS_FILE)
        assert entry["sources"], f"{name} records no sources"
    assert {p: stacks.stack(p)["name"] for p in DEFAULTS} == DEFAULTS


def test_missing_or_malformed_file(tmp_path: Path) -> None:
    with pytest.raises(AcceldeployError, match="does not exist"):
        stacks.load_stacks(tmp_path / "none.yml")
    (tmp_path / "list.yml").write_text("ascend: {}\n")
    with pytest.raises(AcceldeployError, match="expected a mapping `stacks:` of stack name"):
        stacks.load_stacks(tmp_path / "list.yml")
    path = write_stacks(tmp_path, {"gaudi-fork-1.22": {"platform": "tpu"}})
    with pytest.raises(
        AcceldeployError, match=re.escape("stack gaudi-fork-1.22 needs a platform, one of")
    ):
        stacks.load_stacks(path)


def test_a_stack_lacking_keys_is_named(tmp_path: Path) -> None:
    path = write_stacks(tmp_path, {"gaudi-vllm-0.13.0": {"image": "", "software": None}})
    with pytest.raises(
        AcceldeployError, match=re.escape("stack gaudi-vllm-0.13.0 lacks software, image")
    ):
        stacks.load_stacks(path)


def test_one_default_per_platform(tmp_path: Path) -> None:
    two = write_stacks(tmp_path, {"cpu-vllm-0.13.0": {"default": True}})
    with pytest.raises(AcceldeployError, match=re.escape(
        "the cpu platform needs exactly one stack with default: true (found cpu-vllm-0.12.0, "
        "cpu-vllm-0.13.0)"
    )):  # fmt: skip
        stacks.load_stacks(two)
    none = write_stacks(tmp_path, {"gaudi-fork-1.22": {"default": None}})
    with pytest.raises(AcceldeployError, match=r"the gaudi platform .* \(found none\)"):
        stacks.load_stacks(none)


def test_a_stack_whose_parts_disagree_is_refused_naming_the_part_and_fix(tmp_path: Path) -> None:
    # a Gaudi plugin stack on Gaudi software 1.22
    path = write_stacks(tmp_path, {"gaudi-vllm-0.13.0": {"software": "1.22.0"}})
    with pytest.raises(AcceldeployError) as exc:
        stacks.load_stacks(path)
    assert str(exc.value) == (
        "stack gaudi-vllm-0.13.0: its software is Intel Gaudi software 1.22.0, outside its "
        f"compatible_software 1.23.0; fix the stack's software or compatible_software in {path}"
    )
    # a cpu stack on Python 3.9
    path = write_stacks(tmp_path, {"cpu-vllm-0.12.0": {"python": "3.9"}})
    with pytest.raises(AcceldeployError, match=re.escape(
        "stack cpu-vllm-0.12.0: its python is 3.9, outside its requires_python >=3.11,<3.14; "
        "fix the stack's python or requires_python"
    )):  # fmt: skip
        stacks.load_stacks(path)
    # an ascend stack with a CANN outside its list, and every disagreement at once
    path = write_stacks(
        tmp_path,
        {"ascend-vllm-0.13.0": {"cann": "8.3.RC2"}, "cpu-vllm-0.13.0": {"vllm": "0.12.0"}},
    )
    with pytest.raises(AcceldeployError) as exc:
        stacks.load_stacks(path)
    assert (
        "stack ascend-vllm-0.13.0: its cann is CANN 8.3.RC2, outside its compatible_cann 8.5.0"
        in str(exc.value)
    )
    assert (
        "stack cpu-vllm-0.13.0: its vllm is vLLM 0.12.0, outside its compatible_vllm 0.13.0"
        in str(exc.value)
    )


def test_a_known_defect_out_of_shape_is_refused_naming_the_stack_and_key(tmp_path: Path) -> None:
    good = stacks.load_stacks()["cpu-vllm-0.32.0"]["known_defects"][0]
    path = write_stacks(tmp_path, {"cpu-vllm-0.12.0": {"known_defects": [
        {**good, "workaround": "pray"}, {"id": "x", "what": "w", "comment": "c"}]}})  # fmt: skip
    with pytest.raises(AcceldeployError) as exc:
        stacks.load_stacks(path)
    assert str(exc.value) == (
        "stack cpu-vllm-0.12.0: known_defects[0].workaround 'pray' is not one the roles apply; "
        "use amx_tile_permission, hccl_connect_timeout, execute_model_timeout or drop it in "
        f"{path}; stack cpu-vllm-0.12.0: "
        "known_defects[1]: lacks component, source, fix; unknown keys comment; use id, what, "
        f"component, source, fix (and workaround) in {path}"
    )


def test_plan_stacks_shows_the_known_defects_with_their_source() -> None:
    (row,) = [r for r in stackmatrix.matrix() if r["stack"] == "cpu-vllm-0.32.0"]
    (defect,) = row["known_defects"]
    assert defect["id"] == "amx-tile-permission"
    assert defect["workaround"] == "amx_tile_permission"
    assert "cpu_attn.py:544" in defect["source"]
    assert stackmatrix.defect_rows([row])[0][:2] == ["cpu-vllm-0.32.0", defect["component"]]


def test_listed_compares_versions_and_series() -> None:
    assert stacks.listed("8.3.rc2", ["8.3.RC2"]) and stacks.listed("1.22.2", ["1.22"])
    assert not stacks.listed("1.22.2", ["1.23.0"]) and not stacks.listed("1.2", ["1.22"])


# --------------------------------------------------------------------------------------------
# The host's stack


def test_acceldeploy_stack_unset_is_the_platforms_default() -> None:
    for platform, name in DEFAULTS.items():
        assert stacks.host_stack(platform)["name"] == name
        assert get_platform(platform).stack == name
    chosen = stacks.host_stack("gaudi", "gaudi-vllm-0.13.0")
    assert chosen["name"] == "gaudi-vllm-0.13.0" and chosen["software"] == "1.23.0"


def test_an_unknown_stack_or_another_platforms_is_refused_naming_the_variable() -> None:
    with pytest.raises(AcceldeployError) as exc:
        stacks.host_stack("ascend", "ascend-vllm-0.14.0")
    assert str(exc.value).startswith("acceldeploy_stack 'ascend-vllm-0.14.0' is not a stack of ")
    assert "set it to one of ascend-vllm-0.12.0rc1, ascend-vllm-0.13.0" in str(exc.value)
    with pytest.raises(AcceldeployError) as exc:
        stacks.host_stack("ascend", "gaudi-vllm-0.13.0")
    assert str(exc.value) == (
        "acceldeploy_stack 'gaudi-vllm-0.13.0' is a gaudi stack but the host's "
        "acceldeploy_platform is ascend; set acceldeploy_stack to one of "
        "ascend-vllm-0.12.0rc1, ascend-vllm-0.13.0, ascend-vllm-0.23.0, ascend-vllm-0.23.0.post1, or leave it unset"
    )
    # the same refusal from the host's plan, which preflight runs for every host
    hostvars = {**host_vars(*GAUDI), "acceldeploy_stack": "cpu-vllm-0.12.0"}
    with pytest.raises(
        AcceldeployError, match=re.escape("'cpu-vllm-0.12.0' is a cpu stack but the host's")
    ):
        hostplan.host_plan(hostvars)


# --------------------------------------------------------------------------------------------
# Inventory choices against the chosen stack (controller, before any host is contacted)


def test_a_cann_package_outside_the_stack_is_refused_naming_stack_and_fix() -> None:
    stack = stacks.host_stack("ascend", "ascend-vllm-0.13.0")
    inputs = {
        "cann_install": True,
        "cann_packages": {
            "toolkit": "/srv/Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run",
            "kernels": "/srv/Ascend-cann-kernels-910b_8.5.0_linux-aarch64.run",
            "nnal": "/srv/Ascend-cann-nnal_8.5.0_linux-aarch64.run",
        },
    }
    with pytest.raises(AcceldeployError) as exc:
        ascend.ascend_options(inputs, stack)
    assert str(exc.value) == (
        "ascend_runtime_cann_toolkit_package is CANN 8.3.RC2 "
        "(Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run) but vllm-ascend v0.13.0 needs CANN "
        "8.5.0 (stack ascend-vllm-0.13.0): give the CANN 8.5.0 toolkit package, or set "
        "acceldeploy_stack to ascend-vllm-0.12.0rc1"
    )


def test_gaudi_software_outside_the_stack_is_refused_naming_stack_and_fix() -> None:
    plugin = stacks.host_stack("gaudi", "gaudi-vllm-0.13.0")
    with pytest.raises(AcceldeployError) as exc:
        gaudi.gaudi_options({"software": "1.22.0"}, plugin)
    assert str(exc.value) == (
        "gaudi_runtime_software is 1.22.0 but stack gaudi-vllm-0.13.0 (vLLM 0.13.0) runs on "
        "Intel Gaudi software 1.23.0 only: leave gaudi_runtime_software empty (the stack's "
        "1.23.0), or set acceldeploy_stack to gaudi-fork-1.22"
    )
    fork = stacks.stack("gaudi")
    assert gaudi.gaudi_options({"software": "1.22.2"}, fork)["software"] == "1.22.2"
    with pytest.raises(
        AcceldeployError, match=re.escape("or set acceldeploy_stack to gaudi-vllm-0.13.0")
    ):
        gaudi.gaudi_options({"software": "1.23.0"}, fork)


def test_a_python_outside_the_cpu_stack_is_refused_naming_stack_and_fix() -> None:
    options = {"platform": "cpu", "stack": "cpu-vllm-0.12.0", "venv_python": "/usr/bin/python3.9"}
    with pytest.raises(AcceldeployError) as exc:
        python_env.python_env_plan(options)
    message = str(exc.value)
    assert message.startswith("python_env_venv_python is /usr/bin/python3.9, Python 3.9 by its")
    assert "stack cpu-vllm-0.12.0 (vLLM 0.12.0) needs Python >=3.11,<3.14" in message
    assert "set python_env_venv_python to such an interpreter" in message


# --------------------------------------------------------------------------------------------
# First contact: what only the host says, against the host's stack


def test_first_contact_python_against_the_hosts_stack() -> None:
    spec = python_env.python_env_plan({"platform": "cpu", "stack": "cpu-vllm-0.12.0"})
    probe = "\n".join([
        "ID=debian", "VERSION_ID=11", "PRETTY_NAME=Debian GNU/Linux 11 (bullseye)",
        "SYSTEMD=247", "ARCH=x86_64", "GLIBC=2.31",
        "PY ansible_python_interpreter 3.9", "PY python_env_venv_python 3.9",
    ])  # fmt: skip
    errors = targets.check(probe, {"python_env": spec})["errors"]
    assert any(
        e.startswith("python_env_venv_python: /usr/bin/python3.11 is not on this host")
        or "is Python 3.9; stack cpu-vllm-0.12.0 (vLLM 0.12.0) needs Python >=3.11,<3.14" in e
        for e in errors
    ), errors


def test_first_contact_cann_and_driver_against_the_hosts_stack() -> None:
    newer = stacks.host_stack("ascend", "ascend-vllm-0.13.0")
    verdict = ascend.ascend_check(ascend_probe(cann="8.3.RC2"), newer, dict(OPTIONS))
    assert not verdict["ok"]
    assert (
        "CANN 8.3.RC2 is installed (/usr/local/Ascend/ascend-toolkit/8.3.RC2/aarch64-linux) but "
        "vllm-ascend v0.13.0 needs CANN 8.5.0 (acceldeploy_stack = ascend-vllm-0.13.0; "
        "compatible_cann: 8.5.0)"
    ) in verdict["message"]
    assert "or set acceldeploy_stack to ascend-vllm-0.12.0rc1" in verdict["message"]
    assert ascend.ascend_check(ascend_probe(cann="8.3.RC2"), stacks.stack("ascend"), dict(OPTIONS))[
        "ok"
    ]


def test_first_contact_gaudi_driver_against_the_hosts_stack() -> None:
    plugin = stacks.host_stack("gaudi", "gaudi-vllm-0.13.0")
    inputs = {"devices": [0, 1], "image_tarball": "/srv/vllm-gaudi.tar"}
    verdict = gaudi.gaudi_check(gaudi_probe(), plugin, gaudi.gaudi_options(inputs, plugin))
    assert not verdict["ok"]
    assert (
        "habanalabs driver 1.22.1 (hl-smi: Driver Version 1.22.1-97ec1a4) does not match Intel "
        "Gaudi software 1.23.0 (acceldeploy_stack = gaudi-vllm-0.13.0; compatible_software: "
        "1.23.0; image acceldeploy/vllm-gaudi:v0.13.0; gaudi_runtime_driver_match: minor)"
    ) in verdict["message"], verdict["message"]
    assert "or set acceldeploy_stack to gaudi-fork-1.22" in verdict["message"]


# --------------------------------------------------------------------------------------------
# What depends on the stack


def test_a_stack_change_changes_the_env_key_and_builds_beside_the_old_one() -> None:
    old = python_env.python_env_plan({"platform": "ascend"})
    same = python_env.python_env_plan({"platform": "ascend", "stack": "ascend-vllm-0.12.0rc1"})
    new = python_env.python_env_plan({"platform": "ascend", "stack": "ascend-vllm-0.13.0"})
    assert old["key"] == same["key"] and old["stack_name"] == "ascend-vllm-0.12.0rc1"
    assert new["key"] != old["key"] and new["stack_name"] == "ascend-vllm-0.13.0"
    assert new["env"] == "/opt/miniforge3/envs/vllm-v0.13.0" != old["env"]
    assert "torch-npu==2.8.0.post2" in new["requirements_text"]
    fork = python_env.python_env_plan({"platform": "gaudi"})
    plugin = python_env.python_env_plan({"platform": "gaudi", "stack": "gaudi-vllm-0.13.0"})
    assert plugin["key"] != fork["key"]


def test_a_missing_lock_or_engine_options_is_named_when_needed(tmp_path: Path) -> None:
    path = write_stacks(
        tmp_path,
        {"cpu-vllm-0.13.0": {"lock": "vllm-cpu-9.9.9.txt", "engine_options": "vllm-9.9.9"}},
    )
    stacks.load_stacks(path)  # listing and choosing it is fine
    with pytest.raises(AcceldeployError) as exc:
        python_env.python_env_plan(
            {
                "platform": "cpu",
                "stack": "cpu-vllm-0.13.0",
                "stacks_file": str(path),
                "find_links": ["/srv/wheels"],
                "no_index": True,
            }
        )
    assert str(exc.value).startswith(
        f"stack cpu-vllm-0.13.0: its lock {tmp_path}/vllm-cpu-9.9.9.txt is not recorded; make it "
        "with `python3 -m acceldeploy_lab.labenv lock`"
    )
    platform = get_platform("cpu", str(path), "cpu-vllm-0.13.0")
    with pytest.raises(AcceldeployError) as exc:
        platform_engine(platform)
    assert str(exc.value).startswith(
        "stack cpu-vllm-0.13.0: engine options vllm-9.9.9 not recorded ("
    )
    assert "run `python3 -m acceldeploy_lab.engine_options --out " in str(exc.value)


def test_the_stacks_env_defaults_and_gaudi_bucketing_names() -> None:
    fork, plugin = get_platform("gaudi"), get_platform("gaudi", None, "gaudi-vllm-0.13.0")
    assert fork.env["PT_HPU_LAZY_MODE"] == "1" and plugin.env["PT_HPU_LAZY_MODE"] == "0"
    assert get_platform("ascend").env["VLLM_ASCEND_ENABLE_NZ"] == "0"
    assert "VLLM_ASCEND_ENABLE_NZ" not in get_platform("ascend", None, "ascend-vllm-0.13.0").env
    shape = gaudi_launch.Shape(4, 1024, 4, 512, 32, 8192)
    old = gaudi_launch.service_env(shape, [0, 1], "/c", fork.bucketing)
    new = gaudi_launch.service_env(shape, [0, 1], "/c", plugin.bucketing)
    renamed = {k.replace("VLLM_PROMPT_SEQ_", "VLLM_PROMPT_QUERY_"): v for k, v in old.items()}
    del renamed["VLLM_ZERO_PADDING"]
    assert new == renamed
    assert new["VLLM_PROMPT_QUERY_BUCKET_MAX"] == "1024"
    for name in ("VLLM_PROMPT_SEQ_BUCKET_MIN", "VLLM_ZERO_PADDING", "VLLM_GRAPH_PROMPT_RATIO",
                 "VLLM_DELAYED_SAMPLING"):  # fmt: skip
        assert name not in new


def test_engine_option_additions_extend_restricted_choices() -> None:
    ascend_platform = get_platform("ascend")
    assert ascend_platform.engine_additions == (("--quantization", "ascend"),)
    options = platform_engine(ascend_platform).options
    assert options["--quantization"]["choices"] in (None, [])  # unrestricted: nothing to add
    entry = {"flags": ["--kv-cache-dtype"], "choices": ["auto", "fp8"]}
    from acceldeploy.planner.engineopts import _with_choices

    assert _with_choices(entry, ["int8", "fp8"])["choices"] == ["auto", "fp8", "int8"]


def test_a_stack_may_rename_metrics_and_bench_reads_them(tmp_path: Path) -> None:
    assert get_platform("cpu").metrics == stacks.DEFAULT_METRICS
    path = write_stacks(
        tmp_path, {"cpu-vllm-0.13.0": {"metrics": {"running": "vllm:requests_running"}}}
    )
    platform = get_platform("cpu", str(path), "cpu-vllm-0.13.0")
    assert platform.metrics["running"] == "vllm:requests_running"
    from acceldeploy.host.bench import driver

    wanted = {platform.metrics[key]: key for key in driver.METRICS.values()}
    text = 'vllm:requests_running{model_name="m"} 3\nvllm:num_requests_running 9\n'
    assert driver.parse_metrics(text, wanted)["running"] == 3.0
    bad = write_stacks(tmp_path, {"cpu-vllm-0.13.0": {"metrics": {"latency": "x"}}})
    with pytest.raises(
        AcceldeployError, match=re.escape("stack cpu-vllm-0.13.0: metrics has unknown roles")
    ):
        get_platform("cpu", str(bad), "cpu-vllm-0.13.0")


def test_a_host_class_is_the_stack_python_arch_and_glibc() -> None:
    hostvars = {"acceldeploy_platform": "cpu", "acceldeploy_os": "debian-12"}
    default = hostclass.host_class("lab1", hostvars)
    assert default.stack == "cpu-vllm-0.12.0" and default.key == "cpu-cp311-x86_64-glibc2.36"
    other = hostclass.host_class("lab2", {**hostvars, "acceldeploy_stack": "cpu-vllm-0.13.0"})
    assert other.key == "cpu-vllm-0.13.0-cp311-x86_64-glibc2.36" and other != default
    with pytest.raises(AcceldeployError, match="lab3: acceldeploy_stack 'cpu-vllm-9' is not"):
        hostclass.host_class("lab3", {**hostvars, "acceldeploy_stack": "cpu-vllm-9"})


def test_verify_expects_the_stacks_vllm() -> None:
    assert get_platform("gaudi").vllm_version == "0.9.0.2.dev109"
    assert get_platform("gaudi", None, "gaudi-vllm-0.13.0").vllm_version == "0.13.0"


# --------------------------------------------------------------------------------------------
# The Gaudi plugin stack rendered end to end: needs vLLM 0.13.0's recorded option list.

needs_0_13 = pytest.mark.skipif(
    not ENGINE_0_13.is_file(),
    reason=f"{ENGINE_0_13.relative_to(ROOT)} is not recorded yet (the vLLM 0.13.0 option list)",
)


@needs_0_13
def test_the_gaudi_plugin_stack_renders_its_env_and_a_checked_argv() -> None:
    plan = hostplan.host_plan({**host_vars(*GAUDI), "acceldeploy_stack": "gaudi-vllm-0.13.0"})
    (launch,) = plan.launches()
    assert launch.env["PT_HPU_LAZY_MODE"] == "0"
    assert {"VLLM_PROMPT_QUERY_BUCKET_MIN", "VLLM_PROMPT_QUERY_BUCKET_MAX"} <= set(launch.env)
    for name in ("VLLM_PROMPT_SEQ_BUCKET_MIN", "VLLM_ZERO_PADDING", "VLLM_GRAPH_PROMPT_RATIO",
                 "VLLM_DELAYED_SAMPLING"):  # fmt: skip
        assert name not in launch.env
    options = platform_engine(plan.platform).options
    flags = [a.split("=", 1)[0] for a in launch.argv if a.startswith("--")]
    assert flags and [f for f in flags if f not in options] == []
    unit = plan.units()[0]
    assert "acceldeploy/vllm-gaudi:v0.13.0" in unit.exec_argv


@needs_0_13
@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
def test_the_gaudi_plugin_stacks_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    hostvars = {**host_vars(*GAUDI), "acceldeploy_stack": "gaudi-vllm-0.13.0"}
    plan = hostplan.host_plan(hostvars)
    (launch,) = plan.launches()
    unit = build(launch, plan.platform, plan.context.models_root,
                 UnitOptions(launcher_dir=str(tmp_path)))  # fmt: skip
    verify_rendered(unit, tmp_path)


# --------------------------------------------------------------------------------------------
# The matrix


def acceldeploy(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools"), "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "acceldeploy", *args],
        capture_output=True, text=True, check=False, env=env, timeout=120,
    )  # fmt: skip


def test_plan_stacks_prints_the_matrix() -> None:
    proc = acceldeploy("plan", "stacks")
    assert proc.returncode == 0, proc.stderr
    for name in stacks.load_stacks():
        assert name in proc.stdout
    for text in ("CANN 8.5.0", "Intel Gaudi 1.23.0", "VLLM_PROMPT_QUERY_BUCKET_*", "2.8.0.post2"):
        assert text in proc.stdout
    rows = json.loads(acceldeploy("plan", "stacks", "--json").stdout)
    by_name = {r["stack"]: r for r in rows}
    assert [r["stack"] for r in rows if r["default"]] == list(DEFAULTS.values())
    plugin = by_name["gaudi-vllm-0.13.0"]
    assert plugin["plugin"] == "vllm-gaudi v0.13.0" and plugin["engine_options"] == "vllm-0.13.0"
    assert plugin["env"] == "PT_HPU_LAZY_MODE=0" and plugin["sources"]["Gaudi software, drivers"]
    assert by_name["cpu-vllm-0.13.0"]["metrics"] == stacks.DEFAULT_METRICS


def test_the_docs_matrix_is_generated_from_the_file() -> None:
    page = (ROOT / "docs/reference/stacks.md").read_text()
    assert stackmatrix.markdown_matrix(stackmatrix.matrix()) in page
    assert stackmatrix.markdown_sources(stackmatrix.matrix()) in page


def test_stacks_imports_neither_platforms_nor_runtimes() -> None:
    # platforms.py imports stacks.py: stacks must not import back.
    code = (
        "import sys, acceldeploy.planner.stacks; "
        "print(sorted(m for m in sys.modules if m.startswith('acceldeploy.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "acceldeploy.planner.platforms" not in out and "acceldeploy.runtimes" not in out


def test_lock_lines_must_be_pins(tmp_path: Path) -> None:
    (tmp_path / "lock.txt").write_text("# comment\nsix==1.17.0  # why\n\nrich>=13\n")
    entry = {"name": "cpu", "file": str(tmp_path / "stacks.yml"), "lock": "lock.txt",
             "ray": "2.48.0"}  # fmt: skip
    with pytest.raises(AcceldeployError, match=re.escape("not a name==version pin: 'rich>=13'")):
        stacks.lock_requirements(entry)
    (tmp_path / "lock.txt").write_text("ray==2.48.0\nsix==1.17.0  # why\n")
    extra = {**entry, "extra_requirements": ["tqdm==4.0"]}
    assert stacks.lock_requirements(extra) == ["ray==2.48.0", "six==1.17.0", "tqdm==4.0"]
    # the stack's Ray pin and the lock's must agree
    with pytest.raises(AcceldeployError, match=re.escape("does not pin ray==2.47.1 (versions/")):
        stacks.lock_requirements({**entry, "ray": "2.47.1"})
    with pytest.raises(AcceldeployError, match=r"stack cpu: its lock .* is not recorded"):
        stacks.lock_requirements({**entry, "lock": "gone.txt"})
