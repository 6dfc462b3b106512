"""The tiny Qwen3-VL's numbers against what vLLM 0.12's CPU build and Qwen3-VL accept.

Pure: reads tinymodel's config functions, no torch. The limits are copied from the
vLLM 0.12.0 source named in each test.
"""

from __future__ import annotations

import json
import math

import pytest

from acceldeploy_lab import tinymodel

# vllm/v1/attention/backends/cpu_attn.py: CPUAttentionBackend.get_supported_head_sizes
CPU_ATTN_HEAD_SIZES = (32, 64, 96, 128, 160, 192, 224, 256)


def test_text_attention_fits_cpu_backend() -> None:
    text = tinymodel.text_config()
    assert text["head_dim"] in CPU_ATTN_HEAD_SIZES
    assert text["num_attention_heads"] % text["num_key_value_heads"] == 0
    assert text["num_hidden_layers"] >= 1


def test_mrope_sections_fit_head_dim() -> None:
    text = tinymodel.text_config()
    rope = text["rope_scaling"]
    half = text["head_dim"] // 2
    # vllm/model_executor/layers/rotary_embedding/mrope.py asserts the sum.
    assert sum(rope["mrope_section"]) == half
    assert len(rope["mrope_section"]) == 3
    # Interleaved layout (apply_interleaved_rope) strides h and w by 3 within the half.
    assert rope["mrope_interleaved"] is True
    assert all(3 * section <= half for section in rope["mrope_section"][1:])


def test_vision_tower_shapes() -> None:
    vision = tinymodel.vision_config()
    text = tinymodel.text_config()
    assert vision["hidden_size"] % vision["num_heads"] == 0
    # Qwen3-VL's merger projects straight into the language model's hidden size.
    assert vision["out_hidden_size"] == text["hidden_size"]
    # Deepstack features come from vision blocks and are added to the first text layers.
    assert all(0 <= i < vision["depth"] for i in vision["deepstack_visual_indexes"])
    assert len(vision["deepstack_visual_indexes"]) <= text["num_hidden_layers"]
    # Position embeddings are a square grid (num_grid_per_side = sqrt(n)).
    side = math.isqrt(vision["num_position_embeddings"])
    assert side * side == vision["num_position_embeddings"]


def test_token_ids_are_distinct_and_inside_the_vocabulary() -> None:
    config = tinymodel.model_config()
    ids = [
        config["image_token_id"],
        config["video_token_id"],
        config["vision_start_token_id"],
        config["vision_end_token_id"],
    ]
    assert len(set(ids)) == len(ids)
    assert all(0 <= i < tinymodel.VOCAB_SIZE for i in ids)
    assert tinymodel.BPE_VOCAB_SIZE + len(tinymodel.PLAIN_ADDED_TOKENS) <= tinymodel.VOCAB_SIZE
    assert config["image_token_id"] == tinymodel.TOKEN_IDS["<|image_pad|>"]
    for token in ("<|vision_start|>", "<|image_pad|>", "<|video_pad|>", "<|vision_end|>"):
        assert token in tinymodel.SPECIAL_TOKENS
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert token in tinymodel.SPECIAL_TOKENS


def test_config_is_qwen3_vl_and_serializable() -> None:
    config = tinymodel.model_config()
    assert config["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert config["model_type"] == "qwen3_vl"
    assert config["text_config"]["model_type"] == "qwen3_vl_text"
    assert config["tie_word_embeddings"] == config["text_config"]["tie_word_embeddings"]
    assert json.loads(json.dumps(config)) == config


def lab_launch():
    from acceldeploy.serving.hostplan import host_launches

    service = {"name": "qwen3-vl", "model": tinymodel.MODEL_ID, "revision": "main", "port": 8001}
    (launch,) = host_launches({"acceldeploy_platform": "cpu", "acceldeploy_services": [service]})
    return launch


def test_context_covers_the_lab_max_model_len() -> None:
    assert tinymodel.text_config()["max_position_embeddings"] >= lab_launch().max_model_len


def test_processors_agree_with_the_vision_tower() -> None:
    vision = tinymodel.vision_config()
    for processor in (tinymodel.preprocessor_config(), tinymodel.video_preprocessor_config()):
        assert processor["patch_size"] == vision["patch_size"]
        assert processor["merge_size"] == vision["spatial_merge_size"]
        assert processor["temporal_patch_size"] == vision["temporal_patch_size"]
        assert processor["processor_class"] == "Qwen3VLProcessor"
        size = processor["size"]
        assert 0 < size["shortest_edge"] < size["longest_edge"]
    image = tinymodel.preprocessor_config()
    assert image["image_processor_type"] == "Qwen2VLImageProcessorFast"
    # The largest image stays inside the learned position grid's interpolation range and
    # small enough for vLLM's start-up profiling on a 2-core CPU.
    assert image["size"]["longest_edge"] <= 512 * 512


def test_image_token_count() -> None:
    assert tinymodel.image_tokens(128, 96) == 12
    assert tinymodel.image_tokens(64, 64) == 4
    with pytest.raises(ValueError, match="multiples of 32"):
        tinymodel.image_tokens(100, 64)
    with pytest.raises(ValueError, match="pixel bounds"):
        tinymodel.image_tokens(32, 32)


def test_generation_config_stops_on_im_end() -> None:
    generation = tinymodel.generation_config()
    assert tinymodel.TOKEN_IDS["<|im_end|>"] in generation["eos_token_id"]
    assert generation["pad_token_id"] == tinymodel.TOKEN_IDS["<|endoftext|>"]


def test_chat_template_renders_an_image_turn() -> None:
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = json.dumps
    template = env.from_string(tinymodel.CHAT_TEMPLATE)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:,"}},
                {"type": "text", "text": "Describe the picture."},
            ],
        }
    ]
    rendered = template.render(messages=messages, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "Describe the picture.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_lab_service_gets_the_cpu_flags() -> None:
    launch = lab_launch()
    argv = launch.argv
    assert argv[:3] == [
        "/opt/acceldeploy/venv/bin/vllm",
        "serve",
        "/models/acceldeploy/tiny-qwen3-vl@main",
    ]
    assert "--enforce-eager" in argv
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    assert json.loads(argv[argv.index("--limit-mm-per-prompt") + 1]) == {"image": 1, "video": 0}
    assert int(launch.env["VLLM_CPU_KVCACHE_SPACE"]) >= 1


def test_catalog_entry_matches_the_tiny_model() -> None:
    from acceldeploy.planner import catalog
    from acceldeploy.planner.modelconfig import parse_model_arch

    entry = catalog.find(tinymodel.MODEL_ID)
    assert entry is not None
    assert entry.arch() == parse_model_arch(tinymodel.model_config())
