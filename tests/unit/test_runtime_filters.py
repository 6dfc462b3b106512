"""plugins/filter/runtime_filters.py loads from the installed acceldeploy (no sys.path edit)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "filter" / "runtime_filters.py"
FILTERS = [
    "ascend_runtime_fact",
    "ascend_runtime_gate",
    "ascend_runtime_options",
    "gaudi_runtime_daemon_json",
    "gaudi_runtime_fact",
    "gaudi_runtime_gate",
    "gaudi_runtime_hccl",
    "gaudi_runtime_hccl_argv",
    "gaudi_runtime_options",
    "python_env_fact",
    "python_env_fanout_plan",
    "python_env_plan",
    "python_env_record_key",
    "python_env_state_spec",
    "python_env_verify",
    "python_env_wheel_errors",
    "python_env_wheel_fetch_argv",
    "python_env_wheelhouse_only",
    "runtime_service_devices",
    "runtime_stack",
]


def test_plugin_loads_as_ansible_would_and_keeps_every_filter() -> None:
    # A fresh interpreter outside the repository: only the editable install finds acceldeploy.
    code = (
        "import json, runpy, sys; "
        f"ns = runpy.run_path({str(PLUGIN)!r}); "
        "filters = ns['FilterModule']().filters(); "
        "print(json.dumps([sorted(filters), filters['runtime_stack']('cpu')['name']]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    ).stdout
    assert json.loads(out) == [FILTERS, "cpu-vllm-0.12.0"]  # the platform's default stack
    assert "sys.path" not in PLUGIN.read_text()
