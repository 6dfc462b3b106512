import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "configs"
LOGS = ROOT / "tests" / "data" / "logs"


def plan(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "plan.py"), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_kv_json_seed002():
    r = plan(
        "kv",
        "--model-config",
        CONFIGS / "qwen3-vl-8b-instruct.json",
        "--tp",
        2,
        "--block-size",
        128,
        "--kv-cache-dtype",
        "auto",
        "--available-gib",
        44.30,
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["bytes_per_token"] == 73728
    assert out["num_blocks"] == 5040
    assert out["kv_cache_tokens"] == 645_120


def test_kv_json_seed001_does_not_fit():
    r = plan(
        "kv",
        "--model",
        "Qwen/Qwen3-VL-32B-Instruct",
        "--tp",
        2,
        "--block-size",
        128,
        "--available-gib",
        20.06,
        "--max-model-len",
        262144,
        "--json",
    )
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["kv_needed_bytes"] == 32 * 2**30
    assert out["fits"] is False
    assert out["estimated_max_model_len"] == 164_224


def test_kv_budget_form_table():
    r = plan(
        "kv",
        "--model-config",
        CONFIGS / "qwen3-vl-8b-instruct.json",
        "--tp",
        2,
        "--platform",
        "ascend",
        "--total-gib",
        60.96,
        "--gpu-memory-utilization",
        0.95,
        "--weights-gib",
        9.19,
        "--activation-gib",
        3.86,
        "--non-torch-gib",
        0.56,
    )
    assert r.returncode == 0, r.stderr
    assert "645,120" in r.stdout and "44.30 GiB" in r.stdout


def test_explain_json_seed002():
    r = plan("explain", LOGS / "seed002-qwen3-vl-8b-profiling.log", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["non_kv_gib"] == 13.61 and out["kv_gib"] == 44.30
    assert out["weights_gib"] == 9.19 and out["activation_gib"] == 3.86
    assert out["non_torch_gib"] == 0.56 and out["kv_cache_tokens"] == 645_120


def test_render_example_inventory():
    r = plan("render", "-i", ROOT / "inventory/examples/ascend-910b", "--host", "npu-01", "--json")
    assert r.returncode == 0, r.stderr
    (launch,) = json.loads(r.stdout)
    assert launch["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "2,3"
    assert "--max-model-len" in launch["argv"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            [
                "kv",
                "--platform",
                "ascend",
                "--model-config",
                "/nonexistent/config.json",
                "--available-gib",
                1,
            ],
            "model config not found",
        ),
        (
            [
                "kv",
                "--platform",
                "ascend",
                "--model-config",
                CONFIGS / "unknown-arch.json",
                "--available-gib",
                1,
            ],
            "cannot size architecture",
        ),
        (
            [
                "kv",
                "--platform",
                "ascend",
                "--model-config",
                CONFIGS / "qwen3-vl-8b-instruct.json",
                "--tp",
                3,
                "--available-gib",
                1,
            ],
            "TP 3 does not divide",
        ),
        (
            [
                "kv",
                "--platform",
                "ascend",
                "--model-config",
                CONFIGS / "qwen3-vl-8b-instruct.json",
                "--total-gib",
                60,
                "--weights-gib",
                -1,
            ],
            "--weights-gib: must not be negative",
        ),
        (
            [
                "kv",
                "--platform",
                "ascend",
                "--model-config",
                CONFIGS / "qwen3-vl-8b-instruct.json",
                "--available-gib",
                -3,
            ],
            "negative",
        ),
        (["explain", "/nonexistent.log"], "cannot read"),
        (["render", "-i", "/nonexistent", "--host", "x"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_without_traceback(args, reason):
    r = plan(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], r.stderr
