from pathlib import Path

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.vllmlog import parse_log

LOGS = Path(__file__).parents[1] / "data" / "logs"


def test_seed002_profiling_breakdown():
    b = parse_log((LOGS / "seed002-qwen3-vl-8b-profiling.log").read_text())
    assert (b.weights_gib, b.activation_gib, b.non_torch_gib) == (9.19, 3.86, 0.56)
    assert b.non_kv_gib == 13.61
    assert b.kv_gib == 44.30
    assert b.requested_gib == 57.91
    assert b.kv_cache_tokens == 645_120


def test_seed001_does_not_fit_gives_the_fix():
    b = parse_log((LOGS / "seed001-qwen3-vl-32b-does-not-fit.log").read_text())
    assert b.fits is False
    assert (b.max_model_len, b.kv_needed_gib, b.kv_gib) == (262144, 32.0, 20.06)
    assert b.estimated_max_model_len == 164_224
    assert b.advice[0] == "lower --max-model-len to 164224 or less"


def test_vllm_012_format_split_across_ranks():
    log = """
(Worker_TP0 pid=1) INFO 11-20 10:00:00 [gpu_worker.py:359] Available KV cache memory: 20.50 GiB
(Worker_TP1 pid=2) INFO 11-20 10:00:00 [gpu_worker.py:359] Available KV cache memory: 20.41 GiB
(EngineCore_DP0 pid=3) INFO 11-20 10:00:01 [kv_cache_utils.py:1286] GPU KV cache size: 668,736 tokens
(EngineCore_DP0 pid=3) INFO 11-20 10:00:01 [kv_cache_utils.py:1291] Maximum concurrency for 32,768 tokens per request: 20.41x
(Worker_TP0 pid=1) INFO 11-20 09:59:00 [gpu_model_runner.py:3550] Model loading took 7.1234 GiB memory and 4.000000 seconds
"""
    b = parse_log(log)
    assert b.kv_gib == 20.41
    assert b.kv_cache_tokens == 668_736
    assert b.max_model_len == 32_768 and b.max_concurrency == 20.41
    assert b.weights_gib == 7.1234 and b.fits is True


def test_log_without_figures_is_an_error():
    with pytest.raises(AcceldeployError, match="no vLLM memory figures"):
        parse_log("INFO hello\n")
