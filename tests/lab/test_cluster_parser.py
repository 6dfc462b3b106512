"""The two-node examples' head argv (vLLM on Ray, TP 8 x PP 2) through vLLM 0.12.0's own `vllm
serve` parser and its checks, in the lab's vLLM environment (the labenv `make lab` builds):
the same check (launchers.ARGCHECK) roles/vllm_service runs on a host before a changed argv starts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.serving.hostplan import host_plan, with_node_ips
from acceldeploy.serving.launchers import ARGCHECK

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
LABENV_PYTHON = Path("/var/cache/acceldeploy/labenv/bin/python")
# ARGCHECK once per argv in one interpreter (vLLM imports once): {label: exit code, stderr}
EACH = """
import contextlib, io, json, sys
results = {}
for label, argv in json.loads(sys.argv[1]).items():
    sys.argv, err = ["argcheck", json.dumps(argv)], io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            exec(compile(ARGCHECK, "argcheck", "exec"), {"__name__": "__main__"})
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    except Exception as exc:
        code, err = 1, io.StringIO(repr(exc))
    results[label] = [code, err.getvalue()[-1500:]]
print(json.dumps(results))
"""


def head_args(example: str, head: str) -> list[str]:
    hostvars = with_node_ips(hosts_vars(str(ROOT / "inventory/examples" / example)))[head]
    (launch,) = host_plan(hostvars).launches()
    args = ["--model", *launch.argv[launch.argv.index("serve") + 1 :]]
    assert "--distributed-executor-backend" in args and "--pipeline-parallel-size" in args
    return args


def test_the_heads_argv_passes_vllms_own_parser() -> None:
    if not LABENV_PYTHON.exists():
        pytest.skip(f"{LABENV_PYTHON} missing: `make lab` builds it")
    ascend = head_args("ascend-910b-2node", "npu-01")
    argvs = {
        "ascend": ascend,
        "gaudi": head_args("gaudi2-2node", "hpu-01"),
        # what vLLM refuses is refused here too: the check is not a rubber stamp
        "bad": [*ascend, "--pipeline-parallel-size", "two"],
    }
    script = f"ARGCHECK = {ARGCHECK!r}\n{EACH}"
    proc = subprocess.run([str(LABENV_PYTHON), "-c", script, json.dumps(argvs)],
                          capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["ascend"][0] == 0 and results["gaudi"][0] == 0, results
    assert results["bad"][0] != 0 and "pipeline-parallel-size" in results["bad"][1], results
