from pathlib import Path

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import catalog
from acceldeploy.planner.modelconfig import load_model_arch

CONFIGS = Path(__file__).parents[1] / "data" / "configs"


def test_nested_text_config_and_explicit_head_dim():
    a = load_model_arch(CONFIGS / "qwen3-vl-8b-instruct.json")
    assert (a.num_layers, a.num_kv_heads, a.head_size, a.dtype) == (36, 8, 128, "bfloat16")
    assert a.is_multimodal and a.max_position_embeddings == 262144


def test_derived_head_dim():
    a = load_model_arch(CONFIGS / "llama-3.1-8b-fp16.json")
    assert a.head_size == 4096 // 32


def test_model_directory_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3.1-8b-fp16.json").read_text())
    assert load_model_arch(tmp_path).num_layers == 32


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("mistral-7b-v0.1-sliding.json", "sliding_window=4096"),
        ("gemma3-hybrid.json", "cannot size architecture Gemma3ForCausalLM"),
        ("unknown-arch.json", "cannot size architecture FrobnicatorForCausalLM"),
        ("missing.json", "model config not found"),
    ],
)
def test_unsizable_models_are_refused(name, message):
    with pytest.raises(AcceldeployError, match=message):
        load_model_arch(CONFIGS / name)


def test_hybrid_layer_types_refused_even_when_trusted():
    with pytest.raises(AcceldeployError, match="layer types"):
        load_model_arch(CONFIGS / "gemma3-hybrid.json", trust_arch=True)


def test_catalog_entries_all_parse():
    for model in catalog.model_ids():
        entry = catalog.find(model)
        assert entry.arch().num_layers > 0
