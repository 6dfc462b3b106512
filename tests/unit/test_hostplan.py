"""One plan per host: every platform fact from one HostPlatform, one pipeline from the inventory to
the unit, shared by preflight, `plan.py render`, the unit and verify."""

import contextlib
import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.inventory.roledefaults import role_defaults
from acceldeploy.planner import stacks
from acceldeploy.planner.platforms import get_platform, platform_names
from acceldeploy.roles import vllm_service
from acceldeploy.serving import hostplan
from acceldeploy.serving.unit import render_files
from acceldeploy.serving.values import UnitOptions, var_name
from acceldeploy.verify import hoststate, remote, runner

ROOT = Path(__file__).resolve().parents[2]
ASCEND = (str(ROOT / "inventory/examples/ascend-910b"), "npu-01")
GAUDI = (str(ROOT / "inventory/examples/gaudi2"), "hpu-01")


def with_vars(where, **extra):
    return {**host_vars(*where), **extra}


def test_every_platform_takes_its_version_and_image_from_the_stack():
    for name in platform_names():
        platform = get_platform(name)
        pins = stacks.stack(name)
        assert platform.vllm_version == str(pins["vllm"])
        assert platform.env_scripts == tuple(pins.get("env_scripts") or ())
    gaudi = get_platform("gaudi")
    assert gaudi.image == stacks.stack("gaudi")["image"]
    assert gaudi.container_run_args == tuple(stacks.stack("gaudi")["docker_run_args"])


def test_verify_on_gaudi_expects_the_forks_version(monkeypatch):
    """check_host asks the API for the version of the platform's stack (not vLLM 0.12.0)."""
    seen = []

    class Conn:
        user, host, port = "ops", "127.0.0.1", 22

        def open(self):
            pass

        def close(self):
            pass

    @contextlib.contextmanager
    def tunnel(conn, launch):
        yield "http://127.0.0.1:1"

    active = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
              "UnitFileState": "enabled", "NRestarts": "0", "journal_errors": []}  # fmt: skip
    monkeypatch.setattr(remote, "connection", lambda *a: Conn())
    monkeypatch.setattr(
        runner, "collect", lambda conn, units, files, t: {"units": dict.fromkeys(units, active)}
    )
    monkeypatch.setattr(hoststate, "judge_host", lambda *a: [])
    monkeypatch.setattr(hoststate, "judge_devices", lambda *a: [])
    monkeypatch.setattr(runner, "tunnel", tunnel)
    monkeypatch.setattr(runner.api, "check_api", lambda target: seen.append(target) or [])
    runner.check_host("hpu-01", host_vars(*GAUDI), runner.Options())
    (target,) = seen
    assert target.expect_version == stacks.stack("gaudi")["vllm"] != "0.12.0"


def test_the_env_path_python_env_builds_is_what_the_unit_runs():
    venv = hostplan.plan_host(
        with_vars(ASCEND, python_env_manager="venv", python_env_venv_path="/srv/vllm-env")
    )[0]
    assert venv.argv[:2] == ["/srv/vllm-env/bin/vllm", "serve"]
    assert venv.argcheck_python == "/srv/vllm-env/bin/python"
    launcher = render_files(venv)[venv.launcher_path]
    assert "exec /srv/vllm-env/bin/vllm serve" in launcher
    conda = hostplan.plan_host(with_vars(ASCEND, python_env_conda_root="/data/conda"))[0]
    assert conda.argv[0] == "/data/conda/envs/vllm-v0.12.0/bin/vllm"
    explicit = hostplan.plan_host(with_vars(ASCEND, python_env_conda_env_path="/data/env"))[0]
    assert explicit.argv[0] == "/data/env/bin/vllm"


def test_units_run_the_build_the_env_path_points_to_by_its_own_path():
    key = "0365e84e92e997138364dad855e43d0e9cbedc64381efddf34b829db1b850c86"
    fact = {"env": "/srv/vllm-env", "key": key, "manager": "venv"}
    built = hostplan.plan_host(with_vars(ASCEND, python_env_manager="venv",
                                         python_env_venv_path="/srv/vllm-env",
                                         vllm_service_env_built=fact))[0]  # fmt: skip
    assert built.argv[:2] == ["/srv/vllm-env-0365e84e92e9/bin/vllm", "serve"]
    assert built.argcheck_python == "/srv/vllm-env-0365e84e92e9/bin/python"
    # a fact of another path (the env moved in this run's inventory): the path itself
    moved = hostplan.plan_host(with_vars(ASCEND, python_env_manager="venv",
                                         python_env_venv_path="/data/env",
                                         vllm_service_env_built=fact))[0]  # fmt: skip
    assert moved.argv[0] == "/data/env/bin/vllm"


def test_verify_reads_the_tuned_files_where_host_tuning_wrote_them(tmp_path):
    dropin, sysctl = tmp_path / "grub.cfg", tmp_path / "80-site.conf"
    dropin.write_text('GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt"\n')
    sysctl.write_text("kernel.numa_balancing = 0\n")
    files = hoststate.TunedFiles.from_hostvars(
        {"host_tuning_grub_dropin": str(dropin), "host_tuning_sysctl_file": str(sysctl)}
    )
    script, args = hoststate.collect_script([], files)
    out = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=True
    )
    facts = json.loads(out.stdout)
    assert facts["grub_dropin"] == dropin.read_text()
    assert facts["sysctl_files"] == {str(sysctl): sysctl.read_text()}
    assert hoststate.wanted_kernel_args(facts["grub_dropin"]) == ["iommu=pt"]
    defaults = hoststate.TunedFiles.from_hostvars({})
    assert defaults.grub_dropin == role_defaults("host_tuning")["host_tuning_grub_dropin"]


def test_gaudi_bucketing_uses_the_services_block_size():
    hv = host_vars(*GAUDI)
    hv["acceldeploy_services"] = [{**hv["acceldeploy_services"][0], "block_size": 256}]
    (unit,) = hostplan.plan_host(hv)
    assert unit.env["VLLM_PROMPT_SEQ_BUCKET_STEP"] == "256"
    assert unit.env["VLLM_DECODE_BLOCK_BUCKET_STEP"] == "256"
    assert "--block-size" in unit.argv


def test_plan_render_the_unit_and_preflight_show_one_gaudi_argv():
    (unit,) = hostplan.plan_host(host_vars(*GAUDI))
    render = subprocess.run(
        [sys.executable, str(ROOT / "tools/plan.py"), "render", "-i", GAUDI[0], "--host",
         GAUDI[1], "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (rendered,) = json.loads(render.stdout)
    assert rendered["argv"] == unit.argv
    assert unit.exec_argv[-len(unit.argv) :] == unit.argv  # docker run ... <image> <argv>
    assert "--max-num-seqs" in unit.argv  # the bucketing's assumption is in the one argv
    for key, value in rendered["env"].items():
        assert unit.env[key] == value
    # preflight, the host pointed at a closed port: every controller-side check passes, and the
    # run stops at the first contact with the host (unreachable), before anything else
    preflight = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", GAUDI[0],
         str(ROOT / "playbooks/preflight.yml"), "-e", "ansible_host=127.0.0.1",
         "-e", "ansible_port=9", "-e", "ansible_ssh_retries=0"],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
             "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert preflight.returncode == 4, preflight.stdout[-3000:] + preflight.stderr[-3000:]
    tasks = [task for play in json.loads(preflight.stdout)["plays"] for task in play["tasks"]]
    # a role's task is named "<role> : <task>"
    stopped = [t["task"]["name"] for t in tasks if t["hosts"]["hpu-01"].get("unreachable")]
    assert [name.rpartition(" : ")[2] for name in stopped] == [
        "First contact - release, systemd, glibc, each interpreter, the stack's versions (read-only; fails naming the fix)"
    ]
    shown = [
        task["hosts"]["hpu-01"]
        for play in json.loads(preflight.stdout)["plays"]
        for task in play["tasks"]
        if task["task"]["name"] == "Show what each service will run"
    ]
    (result,) = shown
    assert result["msg"] == [f"hpu-01: {unit.name}: {shlex.join(unit.argv)}"]


def test_plan_kv_needs_a_real_platform_and_its_help_matches():
    def kv(*args):
        return subprocess.run(
            [sys.executable, str(ROOT / "tools/plan.py"), "kv", *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    model = ("--model", "Qwen/Qwen3-VL-8B-Instruct", "--available-gib", "10", "--json")
    missing = kv(*model)
    assert missing.returncode == 2 and "--platform" in missing.stderr
    assert kv(*model, "--platform", "cuda").returncode == 2  # not a platform of ours
    cpu = kv(*model, "--platform", "cpu")
    assert json.loads(cpu.stdout)["block_size"] == get_platform("cpu").block_size
    assert kv(*model, "--block-size", "16").returncode == 0
    help_text = " ".join(kv("--help").stdout.split())
    for name in platform_names():
        assert f"{name} {get_platform(name).block_size}" in help_text


def test_unit_options_are_the_roles_variables():
    spec = yaml.safe_load((ROOT / "roles/vllm_service/meta/argument_specs.yml").read_text())
    declared = set(spec["argument_specs"]["main"]["options"])
    defaults = role_defaults("vllm_service")
    for field in dataclasses.fields(UnitOptions):
        assert var_name(field.name) in declared
        assert var_name(field.name) in defaults
    for name in hostplan.PLAN_VARS:
        if name.startswith(("vllm_service_", "python_env_")):
            role = "vllm_service" if name.startswith("vllm_service_") else "python_env"
            # the addresses of the nodes: the role's contract reads them (roles/vllm_service.py)
            assert name in role_defaults(role) or name == hostplan.NODE_IPS_VAR, name
    # the literal defaults agree with the dataclass's
    for field in dataclasses.fields(UnitOptions):
        default = defaults[var_name(field.name)]
        if isinstance(default, str) and "{{" in default:
            continue
        if default is None:  # derived by the role's contract
            assert var_name(field.name) in vllm_service.DERIVED, field.name
            continue
        if default in ("", [], 0) and field.default in (None, "", ()):
            continue
        assert default == field.default or default == 0, field.name


@pytest.mark.parametrize("where", [ASCEND, GAUDI])
def test_plan_render_and_units_agree(where):
    plan = hostplan.host_plan(host_vars(*where))
    assert [x.argv for x in plan.launches()] == [u.argv for u in plan.units()]
