"""Golden units, launchers, argv and env of the examples and the lab (unit.py + roles/vllm_service/templates/),
and `systemd-analyze verify` of each rendered unit where systemd-analyze exists."""

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from unit_verify import verify_rendered

from acceldeploy import roles
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles import vllm_service
from acceldeploy.serving.hostplan import host_plan, plan_host
from acceldeploy.serving.layout import UnitLayout
from acceldeploy.serving.unit import build, render_files
from acceldeploy.serving.values import UnitOptions
from acceldeploy_lab.inventory import InventoryHost, write_inventory

ROOT = Path(__file__).resolve().parents[2]
ASCEND = (str(ROOT / "inventory/examples/ascend-910b"), "npu-01")
GAUDI = (str(ROOT / "inventory/examples/gaudi2"), "hpu-01")


def lab_inventory() -> str:
    """The lab inventory as `tools/lab.py up` writes it, without a running lab."""
    target = Path(tempfile.mkdtemp(prefix="acceldeploy-lab-inventory-"))
    shutil.copytree(ROOT / "inventory/lab/group_vars", target / "group_vars")
    hosts = [InventoryHost("lab1", 1, 2201), InventoryHost("lab2", 2, 2202)]
    return str(write_inventory(target / "hosts.yml", hosts, Path("/run/acceldeploy-lab/key")))


LAB = (lab_inventory(), "lab1")

ASCEND_UNIT = """\
# Managed by acceldeploy (roles/vllm_service); `tools/plan.py render --unit` prints it

[Unit]
Description=vLLM qwen3-vl: /models/Qwen/Qwen3-VL-32B-Instruct@master (ascend) on 127.0.0.1:8000
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=5430
StartLimitBurst=3

[Service]
Type=exec
User=vllm
Group=vllm
SupplementaryGroups=HwHiAiUser
Environment="ASCEND_RT_VISIBLE_DEVICES=2,3"
Environment="CPU_AFFINITY_CONF=1"
Environment="HCCL_OP_EXPANSION_MODE=AIV"
Environment="HF_HUB_OFFLINE=1"
Environment="HOME=/var/lib/acceldeploy-vllm/qwen3-vl"
Environment="PYTHONFAULTHANDLER=1"
Environment="PYTORCH_NPU_ALLOC_CONF=expandable_segments:True"
Environment="TASK_QUEUE_ENABLE=2"
Environment="VLLM_ASCEND_ENABLE_NZ=0"
Environment="XDG_CACHE_HOME=/var/cache/acceldeploy-vllm/qwen3-vl"
WorkingDirectory=/var/lib/acceldeploy-vllm/qwen3-vl
StateDirectory=acceldeploy-vllm/qwen3-vl
CacheDirectory=acceldeploy-vllm/qwen3-vl
ExecStart=/usr/local/libexec/acceldeploy/qwen3-vl.launch
ExecStartPost=/usr/bin/python3 /usr/local/libexec/acceldeploy/vllm-ready http://127.0.0.1:8000/health 1800
ExecStop=/usr/bin/python3 /usr/local/libexec/acceldeploy/vllm-drain http://127.0.0.1:8000 120
TimeoutStartSec=1800
TimeoutStopSec=180
KillMode=mixed
Restart=always
RestartSec=10
LimitNOFILE=65536
LimitMEMLOCK=infinity
DevicePolicy=closed
DeviceAllow=/dev/davinci_manager rw
DeviceAllow=/dev/devmm_svm rw
DeviceAllow=/dev/hisi_hdc rw
DeviceAllow=/dev/davinci2 rw
DeviceAllow=/dev/davinci3 rw
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RemoveIPC=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @obsolete
SystemCallErrorNumber=EPERM
UMask=0027
IPAddressDeny=any
IPAddressAllow=localhost

[Install]
WantedBy=multi-user.target
"""

ASCEND_LAUNCHER = r"""#!/bin/bash
# Managed by acceldeploy (roles/vllm_service); `tools/plan.py render --unit` prints it
# Launcher of qwen3-vl: source the platform's env scripts, then exec the server
# (systemd supervises the exec'd process; the unit holds the environment and the secrets file).
set -eu
set +u
source /usr/local/Ascend/ascend-toolkit/set_env.sh
set -u
set +u
source /usr/local/Ascend/nnal/atb/set_env.sh
set -u
exec /opt/miniforge3/envs/vllm-v0.12.0/bin/vllm serve /models/Qwen/Qwen3-VL-32B-Instruct@master \
    --served-model-name qwen3-vl \
    --host 127.0.0.1 \
    --port 8000 \
    --tensor-parallel-size 2 \
    --max-model-len 16384 \
    --gpu-memory-utilization 0.97 \
    --limit-mm-per-prompt '{"video":0}' \
    --dtype bfloat16 \
    --max-num-seqs 4 \
    --mm-processor-cache-gb 0
"""


def units(where):
    return plan_host(host_vars(*where))


def rendered(unit, section: str | None = None) -> list[list[str]]:
    """[directive, value] of the unit as its template renders it (of one section when named),
    in order."""
    found, current = [], ""
    for line in render_files(unit)[unit.unit_path].splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current and section in (None, current) and "=" in line:
            found.append(line.split("=", 1))
    return found


def test_ascend_example_golden_unit_and_launcher():
    (unit,) = units(ASCEND)
    files = render_files(unit)
    assert files["/etc/systemd/system/qwen3-vl.service"] == ASCEND_UNIT
    assert files["/usr/local/libexec/acceldeploy/qwen3-vl.launch"] == ASCEND_LAUNCHER


def test_the_templates_read_like_the_units_and_share_one_sandbox():
    """Each directive is named in the template, only values come from unit.py; the Ray node's
    unit closes with the served unit's sandbox, line for line."""
    import re

    templates = ROOT / "roles/vllm_service/templates"

    def sandbox(name: str) -> str:
        text = re.sub(r"\{#.*?#\}\n", "", (templates / name).read_text(), flags=re.S)
        return text[text.index("DevicePolicy=closed") : text.index("[Install]")]

    assert sandbox("vllm.service.j2") == sandbox("ray-node.service.j2")
    text = (templates / "vllm.service.j2").read_text()
    for line in ASCEND_UNIT.splitlines()[2:]:
        name = line.split("=", 1)[0]
        assert line.startswith("[") or not line or f"\n{name}=" in text, name


def test_the_role_renders_the_templates_the_package_carries():
    """roles/vllm_service/templates/ holds symlinks to the package's templates (unit.TEMPLATES):
    the role and `plan.py render --unit` render the same files, from a checkout, an installed
    collection or a wheel."""
    from acceldeploy.serving.unit import TEMPLATES

    role = ROOT / "roles/vllm_service/templates"
    assert TEMPLATES.resolve() == ROOT / "tools/acceldeploy/data/vllm_service/templates"
    packaged = sorted(p.name for p in TEMPLATES.glob("*.j2"))
    assert packaged == ["ray-node.service.j2", "vllm-launcher.sh.j2", "vllm.service.j2"]
    assert sorted(p.name for p in role.iterdir()) == packaged
    for name in packaged:
        assert (role / name).is_symlink(), name
        assert (role / name).resolve() == (TEMPLATES / name).resolve(), name


def test_ascend_example_argv_and_env():
    (unit,) = units(ASCEND)
    assert unit.argv == [
        "/opt/miniforge3/envs/vllm-v0.12.0/bin/vllm", "serve",
        "/models/Qwen/Qwen3-VL-32B-Instruct@master",
        "--served-model-name", "qwen3-vl", "--host", "127.0.0.1", "--port", "8000",
        "--tensor-parallel-size", "2", "--max-model-len", "16384",
        "--gpu-memory-utilization", "0.97", "--limit-mm-per-prompt", '{"video":0}',
        "--dtype", "bfloat16", "--max-num-seqs", "4", "--mm-processor-cache-gb", "0",
    ]  # fmt: skip
    assert unit.exec_argv == unit.argv
    assert unit.env == {
        "ASCEND_RT_VISIBLE_DEVICES": "2,3",
        "CPU_AFFINITY_CONF": "1",
        "HCCL_OP_EXPANSION_MODE": "AIV",
        "HF_HUB_OFFLINE": "1",
        "HOME": "/var/lib/acceldeploy-vllm/qwen3-vl",
        "PYTHONFAULTHANDLER": "1",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "TASK_QUEUE_ENABLE": "2",
        "VLLM_ASCEND_ENABLE_NZ": "0",
        "XDG_CACHE_HOME": "/var/cache/acceldeploy-vllm/qwen3-vl",
    }
    assert unit.groups == ["HwHiAiUser"]
    # the parser check sources CANN first, with the conda env's python
    assert unit.argcheck is not None and unit.argcheck[0] == "/bin/bash"
    assert unit.argcheck_python == "/opt/miniforge3/envs/vllm-v0.12.0/bin/python"
    assert unit.argcheck[-1].startswith('["--model", "/models/Qwen/Qwen3-VL-32B-Instruct@master"')


def test_gaudi_example_argv_env_and_container():
    (unit,) = units(GAUDI)
    assert unit.argv == [
        "vllm", "serve", "/models/Qwen/Qwen2.5-VL-7B-Instruct@master",
        "--served-model-name", "qwen2-5-vl", "--host", "127.0.0.1", "--port", "8000",
        "--tensor-parallel-size", "1", "--max-model-len", "32768",
        "--gpu-memory-utilization", "0.9", "--limit-mm-per-prompt", '{"image":5,"video":5}',
        "--dtype", "bfloat16", "--max-num-seqs", "128", "--max-num-batched-tokens", "8192",
    ]  # fmt: skip
    assert unit.env == {
        "HABANA_VISIBLE_MODULES": "0",
        "HF_HUB_OFFLINE": "1",
        "HOME": "/var/lib/acceldeploy-vllm/qwen2-5-vl",
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
        "PYTHONFAULTHANDLER": "1",
        "PT_HPU_ENABLE_LAZY_COLLECTIVES": "true",
        "PT_HPU_LAZY_MODE": "1",
        "PT_HPU_RECIPE_CACHE_CONFIG": "/var/cache/acceldeploy-vllm/qwen2-5-vl/hpu-recipes,false,16384",
        "VLLM_DECODE_BLOCK_BUCKET_MAX": "32896",
        "VLLM_DECODE_BLOCK_BUCKET_MIN": "1",
        "VLLM_DECODE_BLOCK_BUCKET_STEP": "128",
        "VLLM_DECODE_BS_BUCKET_MAX": "128",
        "VLLM_DECODE_BS_BUCKET_MIN": "1",
        "VLLM_DECODE_BS_BUCKET_STEP": "8",
        "VLLM_EXPONENTIAL_BUCKETING": "false",
        "VLLM_PROMPT_BS_BUCKET_MAX": "64",
        "VLLM_PROMPT_BS_BUCKET_MIN": "1",
        "VLLM_PROMPT_BS_BUCKET_STEP": "1",
        "VLLM_PROMPT_SEQ_BUCKET_MAX": "30720",
        "VLLM_PROMPT_SEQ_BUCKET_MIN": "128",
        "VLLM_PROMPT_SEQ_BUCKET_STEP": "128",
        "VLLM_PROMPT_USE_FUSEDSDPA": "true",
        "VLLM_ZERO_PADDING": "true",
        "XDG_CACHE_HOME": "/var/cache/acceldeploy-vllm/qwen2-5-vl",
    }
    ex = unit.exec_argv
    assert ex[:8] == [
        "/usr/bin/docker", "run", "--rm", "--init", "--name=acceldeploy-qwen2-5-vl",
        "--runtime=habana", "-e", "HABANA_VISIBLE_DEVICES=all",
    ]  # fmt: skip
    assert ex[-len(unit.argv) - 1 :] == ["acceldeploy/vllm-fork:aice-v1.22.0", *unit.argv]
    assert "/models:/models:ro" in ex
    recipes = "/var/cache/acceldeploy-vllm/qwen2-5-vl/hpu-recipes"
    assert f"{recipes}:{recipes}:rw" in ex
    assert unit.argcheck is None and unit.groups == ["docker"]
    directives = dict(rendered(unit))
    assert directives["TimeoutStartSec"] == "3600"
    assert directives["ExecStopPost"] == "-/usr/bin/docker rm -f acceldeploy-qwen2-5-vl"


def test_lab_argv_env_and_directives():
    (unit,) = units(LAB)
    assert unit.argv == [
        "/opt/acceldeploy/venv/bin/vllm", "serve", "/models/acceldeploy/tiny-qwen3-vl@main",
        "--served-model-name", "qwen3-vl", "--host", "127.0.0.1", "--port", "8001",
        "--tensor-parallel-size", "1", "--max-model-len", "2048",
        "--limit-mm-per-prompt", '{"image":1,"video":0}', "--enforce-eager",
        "--max-num-seqs", "4",
    ]  # fmt: skip
    assert unit.env == {
        "HF_HUB_OFFLINE": "1",
        "HOME": "/var/lib/acceldeploy-vllm/qwen3-vl",
        "PYTHONFAULTHANDLER": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_SERVER_DEV_MODE": "1",
        "XDG_CACHE_HOME": "/var/cache/acceldeploy-vllm/qwen3-vl",
    }
    service = dict(rendered(unit, "Service"))
    assert service["User"] == "vllm" and "SupplementaryGroups" not in service
    assert service["ExecStart"] == "/usr/local/libexec/acceldeploy/qwen3-vl.launch"
    assert service["ExecStartPost"].endswith("vllm-ready http://127.0.0.1:8001/health 300")
    assert service["TimeoutStartSec"] == "300" and service["Restart"] == "always"
    assert dict(rendered(unit, "Unit"))["StartLimitBurst"] == "3"
    assert "PrivateDevices" not in service and "MemoryDenyWriteExecute" not in service
    assert service["IPAddressDeny"] == "any"
    assert unit.argcheck is not None and unit.argcheck[0] == "/opt/acceldeploy/venv/bin/python"
    assert unit.argcheck[-1].startswith('["--model", "/models/acceldeploy/tiny-qwen3-vl@main"')
    assert not any(k == "PYTHONOPTIMIZE" for k in unit.env)


def _launch(where, **changes):
    (launch,) = host_plan(host_vars(*where)).launches()
    return dataclasses.replace(launch, **changes)


def _build(where, launch, options=None):
    plan = host_plan(host_vars(*where))
    return build(launch, plan.platform, plan.context.models_root, options)


def test_numa_from_topology_and_public_bind():
    launch = _launch(ASCEND, host="0.0.0.0")
    topo = (
        {"device": 2, "numa": 1, "cpus": "48-95"},
        {"device": 3, "numa": 1, "cpus": "48-95"},
    )
    unit = _build(ASCEND, launch, UnitOptions(topology=topo))
    service = dict(rendered(unit, "Service"))
    assert (service["CPUAffinity"], service["NUMAPolicy"], service["NUMAMask"]) == (
        "48-95", "preferred", "1",
    )  # fmt: skip
    assert "IPAddressDeny" not in service  # serves beyond loopback, to any address
    assert unit.health_url == "http://127.0.0.1:8000/health"
    split = _build(
        ASCEND, launch, UnitOptions(topology=({"device": 2, "numa": 0, "cpus": "0-47"}, *topo[1:]))
    )
    assert "CPUAffinity" not in dict(rendered(split, "Service"))


def test_secrets_stay_in_the_environment_file():
    launch = _launch(LAB, secret_env=["VLLM_API_KEY"])
    unit = _build(LAB, launch)
    service = rendered(unit, "Service")
    assert ["EnvironmentFile", "/etc/acceldeploy/secrets/qwen3-vl.env"] in service
    assert "VLLM_API_KEY" not in " ".join(unit.exec_argv) and "VLLM_API_KEY" not in unit.env


def test_env_quoting_and_refusals():
    launch = _launch(LAB, env={"A": 'x "y" 50%'})
    unit = _build(LAB, launch)
    assert ["Environment", '"A=x \\"y\\" 50%%"'] in rendered(unit, "Service")
    with pytest.raises(AcceldeployError, match="PYTHONOPTIMIZE"):
        _build(LAB, _launch(LAB, env={"PYTHONOPTIMIZE": "1"}))
    with pytest.raises(AcceldeployError, match="unknown"):
        UnitOptions.from_vars({"usr": "x"})


def test_plan_render_unit_cli():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/plan.py"), "render", "-i", ASCEND[0], "--host",
         ASCEND[1], "--unit"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "# ==> /etc/systemd/system/qwen3-vl.service <==\n"
        + ASCEND_UNIT
        + "# ==> /usr/local/libexec/acceldeploy/qwen3-vl.launch <==\n"
        + ASCEND_LAUNCHER
    )


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
@pytest.mark.parametrize("where", [ASCEND, GAUDI, LAB], ids=["ascend", "gaudi", "lab"])
def test_rendered_units_pass_systemd_analyze_verify(where, tmp_path):
    (launch,) = host_plan(host_vars(*where)).launches()
    # verify checks that ExecStart/ExecStartPost exist: point them into tmp_path
    unit = _build(where, launch, UnitOptions(launcher_dir=str(tmp_path)))
    verify_rendered(unit, tmp_path)


def test_explicit_len_beyond_the_model_is_refused_before_vllm_does():
    hostvars = host_vars(*LAB)
    (spec,) = hostvars["acceldeploy_services"]
    hostvars["acceldeploy_services"] = [{**spec, "max_model_len": 1000000}]
    with pytest.raises(AcceldeployError, match="max_position_embeddings 8192"):
        host_plan(hostvars).launches()
    allowed = {**spec, "max_model_len": 16384, "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}
    hostvars["acceldeploy_services"] = [allowed]
    assert host_plan(hostvars).launches()[0].max_model_len == 16384


def test_a_parser_check_is_recorded_for_its_argv_and_env_key() -> None:
    import base64
    import runpy

    plugin = runpy.run_path(
        str(Path(__file__).resolve().parents[2] / "plugins/filter/vllm_service_filters.py")
    )
    vllm_service_argcheck_digest = plugin["vllm_service_argcheck_digest"]
    vllm_service_argcheck_passed = plugin["vllm_service_argcheck_passed"]

    argv = ["/opt/acceldeploy/venv/bin/python", "-c", "...", '["--model", "/models/m"]']
    digest = vllm_service_argcheck_digest(argv, "key1")
    assert digest != vllm_service_argcheck_digest(argv, "key2")
    assert digest != vllm_service_argcheck_digest([*argv[:3], '["--model", "/models/n"]'], "key1")

    def slurped(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    units = [{"name": name, "argcheck": argv} for name in ("a", "b", "c")]
    recorded = {"a": slurped(digest + "\n"), "b": slurped("0" * 64), "c": ""}
    assert vllm_service_argcheck_passed(units, recorded, "key1") == ["a"]
    assert vllm_service_argcheck_passed(units, recorded, "key2") == []
    assert vllm_service_argcheck_passed(units, {}, "key1") == []


def test_the_no_op_path_watches_every_file_the_role_writes_and_keeps_secrets_out() -> None:
    units = [
        {
            "name": "qwen3-vl",
            "unit_path": "/etc/systemd/system/qwen3-vl.service",
            "launcher_path": "/usr/local/libexec/acceldeploy/qwen3-vl.launch",
            "argcheck": ["python", "-c", "..."],
        },
        {"name": "ray-qwen3-vl", "argcheck": None},
    ]
    values = {"vllm_service_units": units, "vllm_service_helpers": ["vllm-ready"],
              "vllm_service_launcher_dir": "/usr/local/libexec/acceldeploy",
              "vllm_service_secret_dir": "/etc/s", "vllm_service_last_good_dir": "/lg"}  # fmt: skip
    spec = vllm_service.footprint(Scope.of_values("lab1", values))
    assert spec["units"] == ["qwen3-vl.service", "ray-qwen3-vl.service"]
    assert set(spec["files"]) == {
        "/usr/local/libexec/acceldeploy/vllm-ready",
        "/etc/passwd",
        "/etc/group",
        "/etc/systemd/system/qwen3-vl.service",
        "/usr/local/libexec/acceldeploy/qwen3-vl.launch",
        "/etc/s/qwen3-vl.env",
        "/lg/qwen3-vl.service",
        "/lg/qwen3-vl.launch",
        "/lg/qwen3-vl.argcheck",
        "/etc/systemd/system/ray-qwen3-vl.service",
        "/usr/local/libexec/acceldeploy/ray-qwen3-vl.launch",
        "/etc/s/ray-qwen3-vl.env",
        "/lg/ray-qwen3-vl.service",
        "/lg/ray-qwen3-vl.launch",
    }
    digest = vllm_service.secrets_digest
    services = [{"name": "qwen3-vl", "api_key": "sk-secret-1"}]
    one = digest(services, ["qwen3-vl"])
    assert "sk-secret-1" not in one
    assert one != digest([{"name": "qwen3-vl", "api_key": "sk-secret-2"}], ["qwen3-vl"])
    assert one != digest([{"name": "qwen3-vl"}], ["qwen3-vl"])


def test_the_files_of_a_unit_are_the_paths_build_gives_it() -> None:
    opts = UnitOptions(launcher_dir="/l", secret_dir="/s")
    unit = _build(LAB, _launch(LAB, secret_env=["VLLM_API_KEY"]), opts)
    layout = UnitLayout("/l", "/s", "/lg")
    files = layout.files(unit.name)
    assert files[:3] == [unit.unit_path, unit.launcher_path, unit.secret_path]
    assert files[3:] == [f"/lg/{os.path.basename(unit.unit_path)}",
                         f"/lg/{os.path.basename(unit.launcher_path)}",
                         f"/lg/{unit.name}.argcheck"]  # fmt: skip
    assert layout.files(unit.name, argcheck=False) == files[:-1]


def test_planned_stops_drain_and_hooks_run_as_root_without_blocking() -> None:
    launch = _launch(LAB)
    service = rendered(_build(LAB, launch), "Service")
    stops = [d[1] for d in service if d[0] == "ExecStop"]
    assert stops == [f"/usr/bin/python3 /usr/local/libexec/acceldeploy/vllm-drain "
                     f"http://127.0.0.1:{launch.port} 120"]  # fmt: skip
    assert ["TimeoutStopSec", "180"] in service
    hooked = rendered(_build(LAB, launch, UnitOptions.from_vars(
        {"drain_timeout": "30", "drain_hook": "/usr/local/bin/lb-ctl disable %N",
         "ready_hook": "/usr/local/bin/lb-ctl enable %N"}
    )), "Service")  # fmt: skip
    assert next(d[1] for d in hooked if d[0] == "ExecStop") == "-+/usr/local/bin/lb-ctl disable %N"
    assert [d[1] for d in hooked if d[0] == "ExecStartPost"][-1] == (
        "-+/usr/local/bin/lb-ctl enable %N"
    )
    assert ["TimeoutStopSec", "90"] in hooked
    off = rendered(_build(LAB, launch, UnitOptions(drain_timeout=0)), "Service")
    assert not [d for d in off if d[0] == "ExecStop"] and ["TimeoutStopSec", "60"] in off
    for bad, says in (({"drain_hook": "lb-ctl disable"}, "vllm_service_drain_hook must be"),
                      ({"ready_hook": "/bin/x\n/bin/y"}, "vllm_service_ready_hook must be"),
                      ({"drain_timeout": -1}, "vllm_service_drain_timeout must be")):  # fmt: skip
        with pytest.raises(AcceldeployError, match=says):
            UnitOptions.from_vars(bad)


def test_the_drain_counts_the_series_its_stack_names() -> None:
    """vLLM's own names need no argument (units of the default stacks stay as they were); a
    stack naming running / waiting otherwise hands vllm-drain its names."""
    launch = _launch(LAB)
    plan = host_plan(host_vars(*LAB))
    renamed = {**plan.platform.metrics, "running": "vllm:requests_running"}
    platform = dataclasses.replace(plan.platform, metrics=renamed)
    unit = build(launch, platform, plan.context.models_root, None)
    (stop,) = [d[1] for d in rendered(unit, "Service") if d[0] == "ExecStop"]
    assert stop.endswith(f":{launch.port} 120 vllm:requests_running vllm:num_requests_waiting")


def test_vllm_drain_counts_the_series_it_is_given() -> None:
    import time

    from metrics_endpoint import serve

    started = time.monotonic()

    def metrics() -> bytes:
        running = 1 if time.monotonic() - started < 1.5 else 0
        return (f"vllm:requests_running {running}.0\nvllm:num_requests_running 0.0\n").encode()

    server = serve(metrics)
    drain = Path(__file__).resolve().parents[2] / "tools/acceldeploy/host/helpers/vllm-drain"
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        argv = [sys.executable, str(drain), url, "30", "vllm:requests_running", "vllm:waiting"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "drained 1 request(s)" in proc.stdout, proc
        assert time.monotonic() - started >= 1.5
    finally:
        server.shutdown()


def test_vllm_drain_waits_for_the_requests_in_flight(tmp_path: Path) -> None:
    """tools/acceldeploy/host/helpers/vllm-drain against a real HTTP server whose /metrics shows
    one running request for 1.5 s from the drain's first scrape: it waits that long, says so,
    and exits 0. A /metrics too busy to answer within its 5 s is waited for, not taken for a
    server that is gone; an open client connection is waited for too. Every window counts from
    the drain's own first scrape, not from when it was started: on a loaded machine its
    interpreter takes seconds to start (the unit suite's hunt in random order under load saw
    "drained 0" once when the window counted from the test's start)."""
    import socket
    import threading
    import time

    from metrics_endpoint import serve

    first_scrape: list[float] = []
    at_next_scrape: list[Callable[[], None]] = []
    slow = threading.Event()

    def metrics() -> bytes:
        now = time.monotonic()
        first_scrape[:] = first_scrape or [now]
        while at_next_scrape:
            at_next_scrape.pop()()
        if slow.is_set():
            slow.clear()
            time.sleep(6)
        running = 1 if now - first_scrape[0] < 1.5 else 0
        return (f'vllm:num_requests_running{{model_name="m"}} {running}.0\n'
                'vllm:num_requests_waiting{model_name="m"} 0.0\n').encode()  # fmt: skip

    server = serve(metrics)
    drain = Path(__file__).resolve().parents[2] / "tools/acceldeploy/host/helpers/vllm-drain"
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        proc = subprocess.run([sys.executable, str(drain), url, "30"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "MAINPID": str(os.getpid())})  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "1 request(s) in flight" in proc.stdout and "drained 1 request(s)" in proc.stdout
        assert time.monotonic() - first_scrape[0] >= 1.5
        timed_out = subprocess.run([sys.executable, str(drain), url, "0"], capture_output=True,
                                   text=True, timeout=60)  # fmt: skip
        assert timed_out.returncode == 0
        slow.set()
        busy = time.monotonic()
        waited = subprocess.run([sys.executable, str(drain), url, "30"], capture_output=True,
                                text=True, timeout=60)  # fmt: skip
        assert waited.returncode == 0 and "drained 0 request(s)" in waited.stdout, waited
        assert time.monotonic() - busy >= 5
        # /metrics says 0, but a client's connection is open (a request the engine has not
        # seen yet): the drain waits until it closes
        client = socket.create_connection(server.server_address[:2])
        at_next_scrape.append(lambda: threading.Timer(2.0, client.close).start())
        held = time.monotonic()
        waited = subprocess.run([sys.executable, str(drain), url, "30"], capture_output=True,
                                text=True, timeout=60)  # fmt: skip
        assert waited.returncode == 0 and "drained 1 request(s)" in waited.stdout, waited
        assert time.monotonic() - held >= 2
    finally:
        server.shutdown()
    silent = subprocess.run([sys.executable, str(drain), "http://127.0.0.1:9", "30"],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert silent.returncode == 0 and silent.stdout == ""


def test_a_failed_host_report_says_the_cause_the_rollback_and_who_switched() -> None:
    import runpy

    plugin = runpy.run_path(
        str(Path(__file__).resolve().parents[2] / "plugins/filter/vllm_service_filters.py")
    )
    files, report = plugin["vllm_service_rollback_files"], plugin["vllm_service_failure_report"]
    unit = {"name": "qwen3-vl", "unit_path": "/etc/systemd/system/qwen3-vl.service",
            "launcher_path": "/usr/local/libexec/acceldeploy/qwen3-vl.launch"}  # fmt: skip
    new = {**unit, "name": "new"}
    assert files([unit]) == [{"path": unit["unit_path"], "mode": "0644"},
                             {"path": unit["launcher_path"], "mode": "0755"}]  # fmt: skip
    failure = {"cause": "qwen3-vl did not become ready on lab2", "journal": ["a", "OSError: x"]}
    text = report("lab2", failure, {"qwen3-vl": 200}, ["new"], ["lab1", "lab2"], True)
    assert text.startswith("qwen3-vl did not become ready on lab2. The rollout stops here")
    assert "Rolled back on lab2: qwen3-vl serve again" in text
    assert "Stopped on lab2 (new in this run, no last good set): new." in text
    assert "serving the new units: lab1 (left as they are; -e acceldeploy_rollback_all" in text
    assert text.endswith("Journal: a | OSError: x")
    down = report("lab2", failure, {"qwen3-vl": -1}, [], [], True)
    assert "ROLLBACK FAILED on lab2: qwen3-vl" in down and "serving the new units" not in down
    # acceldeploy_rollback_all: the switched hosts' services, put back, serving or not
    switched = plugin["vllm_service_switched_services"](
        [{"inventory_hostname": "lab1", "vllm_service_restart": ["qwen3-vl"],
          "vllm_service_units": [{**unit, "health_url": "http://127.0.0.1:8001/health"}, new]},
         {"inventory_hostname": "lab2", "vllm_service_restart": ["qwen3-vl"],
          "vllm_service_units": [unit]}], "lab2")  # fmt: skip
    assert switched == [{"host": "lab1", "name": "qwen3-vl", "unit_path": unit["unit_path"],
                         "unit_file": "qwen3-vl.service", "launcher_path": unit["launcher_path"],
                         "launcher_file": "qwen3-vl.launch",
                         "health_url": "http://127.0.0.1:8001/health"}]  # fmt: skip
    # [switched service, what putting it back said, its /health status after]
    back = [[switched[0], "restored", 200],
            [{**switched[0], "host": "lab0"}, "restored", -1],
            [{**switched[0], "host": "lab3"}, "stopped", 0]]  # fmt: skip
    text = report("lab2", failure, {}, [], ["lab1", "lab0", "lab3"], True, back)
    assert ("Rolled back too (acceldeploy_rollback_all): lab1: qwen3-vl serves again on what "
            "this run replaced; ROLLBACK FAILED lab0: qwen3-vl") in text  # fmt: skip
    assert "lab3: qwen3-vl stopped (new in this run)." in text and "left as they are" not in text
    # without acceldeploy_rollback_all nothing was put back: named, left as they are
    text = report("lab2", failure, {}, [], ["lab1"], True, [])
    assert "Rolled back too" not in text and "lab1 (left as they are" in text

    assert "lab2 was not rolled back" in report("lab2", failure, {}, [], [], False)
    assert "nothing was rolled back" in report("lab2", failure, {}, [], [], True)


def test_a_group_rolls_back_as_one() -> None:
    import runpy

    plugin = runpy.run_path(
        str(Path(__file__).resolve().parents[2] / "plugins/filter/vllm_service_filters.py")
    )
    head = {"name": "m", "unit_path": "/etc/systemd/system/m.service", "health_url": "h",
            "launcher_path": "/usr/local/libexec/acceldeploy/m.launch",
            "readiness": {"units_by_node": {"lab1": ["m"], "lab2": ["dp-m"]}}}  # fmt: skip
    rank = {**head, "name": "dp-m", "unit_path": "/etc/systemd/system/dp-m.service",
            "launcher_path": "/usr/local/libexec/acceldeploy/dp-m.launch", "health_url": ""}  # fmt: skip
    other = {**head, "name": "solo", "readiness": None}
    hostvars = {
        "lab1": {"inventory_hostname": "lab1", "vllm_service_restart": ["m"],
                 "vllm_service_units": [head]},
        "lab2": {"inventory_hostname": "lab2", "vllm_service_restart": ["dp-m", "solo"],
                 "vllm_service_units": [rank, other]},
    }  # fmt: skip
    peers = plugin["vllm_service_group_peers"]
    (back,) = peers([head], hostvars, "lab1")  # lab2's rank, not its unrelated service
    assert (back["host"], back["name"], back["unit_file"]) == ("lab2", "dp-m", "dp-m.service")
    (back,) = peers([rank, other], hostvars, "lab2")  # the head, from its rank's failure
    assert (back["host"], back["name"]) == ("lab1", "m")
    assert peers([other], hostvars, "lab2") == []
    failure = {"cause": "m did not become ready on lab1"}
    text = plugin["vllm_service_failure_report"](
        "lab1", failure, {"m": 200}, [], [], True, [], [], [[{**back, "host": "lab2",
                                                            "name": "dp-m"}, "restored"]])  # fmt: skip
    assert "Its group rolls back as one: lab2: dp-m restarted on its last good unit" in text


def test_model_prune_spec_covers_the_revisions_of_the_served_models() -> None:
    """vllm_service's contract, part prune (roles/vllm_service/tasks/prune.yml)."""
    units = [{"launch": {"model_path": "/models/Qwen/VL@r2"}},
             {"launch": {"model_path": "/models/Qwen/VL@r1"}},
             {"launch": {"model_path": "/srv/own-model"}}]  # fmt: skip

    def spec(units: list, launchers: str, good: str, job: dict, settings: dict) -> dict:
        values = {"vllm_service_units": units, "vllm_service_launcher_dir": launchers,
                  "vllm_service_secret_dir": "/etc/a", "vllm_service_last_good_dir": good,
                  "model_weights_job": job, "model_weights_info": {"settings": settings}}  # fmt: skip
        planned = roles.plan("vllm_service", Scope.of_values("lab1", values), "prune")
        return dict(planned["vllm_service_model_revisions"])

    # a seed host keeps the revision it feeds to others (its models job) whatever it serves
    job = {"hub": [{"model": "Qwen/VL", "revision": "r0"}], "pull": [], "verify": []}
    settings = {"root": "/models", "shared_storage": False}
    assert spec(units, "/usr/libexec/a", "/var/lib/a/good", job, settings) == {
        "patterns": ["/models/Qwen/VL@*"],
        "current": ["/models/Qwen/VL@r0", "/models/Qwen/VL@r1", "/models/Qwen/VL@r2",
                    "/srv/own-model"],
        "in_use_files": ["/usr/libexec/a/*.launch", "/var/lib/a/good/*.launch"],
    }  # fmt: skip
    shared = spec(units, "/l", "/g", {}, {**settings, "shared_storage": True})
    assert shared["patterns"] == []


def test_behind_a_gateway_a_private_bind_answers_the_gateway_and_the_host_only():
    launch = _launch(ASCEND, host="10.0.0.11")
    unit = _build(
        ASCEND, launch, UnitOptions.from_vars({"allow_from": ["10.0.0.5", "10.0.1.0/24"]})
    )
    service = dict(rendered(unit, "Service"))
    assert service["IPAddressDeny"] == "any"
    assert service["IPAddressAllow"] == "localhost 10.0.0.11 10.0.0.5 10.0.1.0/24"
    on_all = _build(ASCEND, dataclasses.replace(launch, host="0.0.0.0"),
                    UnitOptions(allow_from=("10.0.0.5",)))  # fmt: skip
    assert dict(rendered(on_all, "Service"))["IPAddressAllow"] == "localhost 10.0.0.5"
    # a gateway on the service's own machine reaches a loopback bind: localhost is enough
    local = _build(ASCEND, _launch(ASCEND), UnitOptions(allow_from=("10.0.0.5",)))
    assert dict(rendered(local, "Service"))["IPAddressAllow"] == "localhost"


@pytest.mark.parametrize("value", [["gw1.example"], "10.0.0.5", [["10.0.0.5"]]])
def test_allow_from_takes_addresses_only(value):
    with pytest.raises(AcceldeployError, match=r"vllm_service_allow_from"):
        UnitOptions.from_vars({"allow_from": value})
