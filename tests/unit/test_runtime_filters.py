"""plugins/filter/runtime_filters.py loads from the installed acceldeploy (no sys.path edit)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "filter" / "runtime_filters.py"
FILTERS = [
    "ascend_runtime_check",
    "ascend_runtime_fact",
    "gaudi_runtime_check",
    "gaudi_runtime_daemon_json",
    "gaudi_runtime_fact",
    "gaudi_runtime_hccl",
    "python_env_fact",
    "python_env_fanout_plan",
    "python_env_record_key",
    "python_env_verify",
]


def test_plugin_loads_as_ansible_would_and_keeps_every_filter() -> None:
    # A fresh interpreter outside the repository: only the editable install finds acceldeploy.
    code = (
        "import json, runpy, sys; "
        f"ns = runpy.run_path({str(PLUGIN)!r}); "
        "filters = ns['FilterModule']().filters(); "
        "print(json.dumps(sorted(filters)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    ).stdout
    assert json.loads(out) == FILTERS
    assert "sys.path" not in PLUGIN.read_text()
