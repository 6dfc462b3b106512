"""The planner and the log reader against real start-up logs (tests/data/public_logs)."""

from pathlib import Path

import pytest
import yaml

from acceldeploy.planner.kvplan import GIB, cdiv, kv_layout
from acceldeploy.planner.modelconfig import parse_model_arch
from acceldeploy.planner.vllmlog import parse_log

DATA = Path(__file__).parents[1] / "data" / "public_logs"
MANIFEST = yaml.safe_load((DATA / "manifest.yml").read_text())["logs"]
CHECKED = [e for e in MANIFEST if e["check"].get("tokens_match")]


def arch_of(entry):
    cfg = entry["config"]
    if cfg.get("mla"):
        config = {
            "model_type": "deepseek_v3",
            "num_hidden_layers": cfg["num_hidden_layers"],
            "num_attention_heads": 128,
            "kv_lora_rank": cfg["kv_lora_rank"],
            "qk_rope_head_dim": cfg["qk_rope_head_dim"],
        }
    else:
        config = {
            "model_type": "llama",
            "num_hidden_layers": cfg["num_hidden_layers"],
            "num_attention_heads": 64,
            "num_key_value_heads": cfg["num_key_value_heads"],
            "head_dim": cfg["head_dim"],
        }
    config["torch_dtype"] = "float16" if cfg["kv_element_bytes"] == 2 else "float8"
    return parse_model_arch(config, where=entry["name"])


def test_manifest_has_the_coverage_we_rely_on():
    assert len(CHECKED) >= 8 and len(SIZED) >= 8
    assert {e["tp"] for e in CHECKED} >= {1, 2, 4, 8}
    assert any(e["config"].get("mla") for e in CHECKED)


@pytest.mark.parametrize("entry", CHECKED, ids=[e["name"] for e in CHECKED])
def test_log_reader_finds_the_logged_kv_cache_size(entry):
    budget = parse_log((DATA / entry["file"]).read_text())
    assert budget.kv_cache_tokens == entry["expected"]["kv_cache_tokens"]


def available_range(entry):
    avail = entry["available_kv"]
    exact = avail.get("bytes_exact") or avail.get("bytes")
    if exact:
        return exact, exact
    if "gib" in avail:
        return int((avail["gib"] - 0.005) * GIB), int((avail["gib"] + 0.005) * GIB)
    return None


# The planner sizes PP 1 (pipeline parallel splits layers unevenly), from a logged budget.
SIZED = [e for e in CHECKED if e.get("pp", 1) == 1 and available_range(e) is not None]


@pytest.mark.parametrize("entry", SIZED, ids=[e["name"] for e in SIZED])
def test_planner_reproduces_vllm_numbers(entry):
    layout = kv_layout(arch_of(entry), tp=entry["tp"], block_size=entry["block_size"])
    expected = entry["expected"]["kv_cache_tokens"]
    bounds = available_range(entry)
    low, high = (layout.kv_cache_tokens(b) for b in bounds)
    assert low <= expected <= high
    concurrency = entry["expected"].get("max_concurrency")
    if concurrency and entry.get("max_model_len"):
        blocks = expected // entry["block_size"]
        length = entry["max_model_len"]
        assert round(blocks / cdiv(length, entry["block_size"]), 2) == concurrency


def test_kv_error_case_estimate():
    (entry,) = [e for e in MANIFEST if "kv-error" in e["name"]]
    layout = kv_layout(arch_of(entry), tp=entry["tp"], block_size=entry["block_size"])
    expected = entry["expected"]
    assert layout.needed_bytes(expected["error_max_seq_len"]) / GIB == expected["needed_gib"]
    available = entry["available_kv"]["bytes"]
    assert (
        layout.estimate_max_model_len(available, expected["error_max_seq_len"])
        == (expected["estimated_max_model_len"])
    )
    assert parse_log((DATA / entry["file"]).read_text()).estimated_max_model_len == 164_224
