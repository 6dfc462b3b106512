"""filter_plugins/runtime_filters.py loads from the installed acceldeploy (no sys.path edit)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "filter_plugins" / "runtime_filters.py"
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
    "python_env_plan",
    "python_env_prunable",
    "python_env_record_key",
    "python_env_state_spec",
    "python_env_verify",
    "python_env_wheel_errors",
    "python_env_wheel_fetch_argv",
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
    assert json.loads(out) == [FILTERS, "cpu"]
    assert "sys.path" not in PLUGIN.read_text()


def test_pruning_keeps_current_previous_the_newest_and_what_is_in_use() -> None:
    import runpy

    prunable = runpy.run_path(str(PLUGIN))["python_env_prunable"]
    builds = [{"path": f"/opt/venv-{k}", "mtime": t} for k, t in
              (("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0), ("e", 5.0))]  # fmt: skip
    complete = {"complete": [b["path"] for b in builds]}
    # current e, it replaced d; keep 1: only d kept beside e
    assert prunable(builds, "/opt/venv-e", "/opt/venv-d", 1, complete) == [
        "/opt/venv-a", "/opt/venv-b", "/opt/venv-c",
    ]  # fmt: skip
    # a rolled-back service still runs on b: never pruned
    in_use = {**complete, "in_use": ["/opt/venv-b"]}
    assert prunable(builds, "/opt/venv-e", "/opt/venv-d", 1, in_use) == [
        "/opt/venv-a",
        "/opt/venv-c",
    ]
    assert prunable(builds, "/opt/venv-e", "/opt/venv-d", 2, complete) == [
        "/opt/venv-a",
        "/opt/venv-b",
    ]
    # keep 1 with nothing replaced: the newest complete other is kept, a half-built one is not
    half = {"complete": ["/opt/venv-a", "/opt/venv-b", "/opt/venv-e"]}
    assert prunable(builds, "/opt/venv-e", "/opt/venv-e", 1, half) == [
        "/opt/venv-a", "/opt/venv-c", "/opt/venv-d",
    ]  # fmt: skip
    assert prunable(builds, "/opt/venv-e", "", 0, {}) == [b["path"] for b in builds[:4]]
