"""tools/acceldeploy/host/state/switch.py: the line --check --diff prints per changed service."""

from __future__ import annotations

from pathlib import Path

from acceldeploy.host.state import switch
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving import hostplan
from acceldeploy.serving.unit import render_files

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory/examples"
HOSTS = ((EXAMPLES / "ascend-910b", "npu-01"), (EXAMPLES / "gaudi2", "hpu-01"))

DEPLOYED = """#!/bin/bash
set -eu
exec /opt/acceldeploy/venv-0365e84e92e9/bin/vllm serve /models/acceldeploy/tiny@main \\
    --served-model-name qwen3-vl \\
    --limit-mm-per-prompt '{"image":1,"video":0}' \\
    --enforce-eager \\
    --max-num-seqs 4
"""


def test_launcher_argv_reads_the_exec_line_and_its_continuations():
    argv = switch.launcher_argv(DEPLOYED)
    assert argv is not None and argv[:3] == [
        "/opt/acceldeploy/venv-0365e84e92e9/bin/vllm", "serve", "/models/acceldeploy/tiny@main",
    ]  # fmt: skip
    assert argv[-2:] == ["--max-num-seqs", "4"] and '{"image":1,"video":0}' in argv
    assert switch.launcher_argv("#!/bin/bash\n") is None


def test_the_line_names_the_env_the_model_and_the_flags_that_change():
    planned = [*switch.launcher_argv(DEPLOYED)]  # type: ignore[misc]
    planned[0] = "/opt/acceldeploy/venv-abcdef123456/bin/vllm"
    planned[2] = "/models/acceldeploy/tiny@4781"
    planned[-1] = "8"
    assert switch.switch_line("qwen3-vl", DEPLOYED, planned) == (
        "qwen3-vl: env /opt/acceldeploy/venv-0365e84e92e9 -> /opt/acceldeploy/venv-abcdef123456; "
        "model /models/acceldeploy/tiny@main -> /models/acceldeploy/tiny@4781; "
        "flags -['--max-num-seqs 4'] +['--max-num-seqs 8']"
    )
    same = switch.launcher_argv(DEPLOYED) or []
    assert switch.switch_line("q", DEPLOYED, same) == "q: same argv (unit, env file or secrets)"
    assert switch.switch_line("q", None, same) == "q: new service (no launcher yet)"


def test_a_rendered_launcher_reads_back_as_the_units_exec_argv():
    for inventory, host in HOSTS:
        for unit in hostplan.plan_host(host_vars(str(inventory), host)):
            text = render_files(unit)[unit.launcher_path]
            assert switch.launcher_argv(text) == unit.exec_argv, unit.name
