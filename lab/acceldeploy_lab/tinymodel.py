"""A tiny Qwen3-VL model made on this machine: no hub, fixed seed, a few MB.

The config numbers are pure functions (the controller and unit tests read them without
torch). Building the files needs torch, transformers and tokenizers, so it runs inside
the lab toolchain venv (``acceldeploy_lab.labenv``):

    $ACCELDEPLOY_CACHE/labenv/bin/python -m acceldeploy_lab.tinymodel OUT_DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

DEFAULT_SEED = 1234
MODEL_ID = "acceldeploy/tiny-qwen3-vl"

# Special tokens take the first ids (BPE training puts them there), so the token ids in
# config.json are fixed by this list alone.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Added after training, not special: Qwen's tool-call and reasoning markers.
PLAIN_ADDED_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
TOKEN_IDS = {token: index for index, token in enumerate(SPECIAL_TOKENS)}

BPE_VOCAB_SIZE = 1000
# Embedding rows: a multiple of 64, at least the tokenizer's BPE + added tokens.
VOCAB_SIZE = 1024

TEXT_HIDDEN_SIZE = 256
TEXT_LAYERS = 2
TEXT_HEADS = 4
TEXT_KV_HEADS = 2
# vLLM's CPU attention supports head sizes 32, 64, 96, ..., 256; 64 is the smallest that
# also splits evenly into the three M-RoPE sections below.
HEAD_DIM = 64
TEXT_INTERMEDIATE_SIZE = 512
MAX_POSITION_EMBEDDINGS = 8192
# Qwen3-VL's [24, 20, 20] for head_dim 128, halved: the sum must be head_dim // 2.
MROPE_SECTION = (12, 10, 10)

VISION_HIDDEN_SIZE = 128
VISION_HEADS = 2
VISION_DEPTH = 2
VISION_INTERMEDIATE_SIZE = 256
PATCH_SIZE = 16
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
# A 16 x 16 grid of learned position embeddings (interpolated for other image sizes).
NUM_POSITION_EMBEDDINGS = 256
DEEPSTACK_VISUAL_INDEXES = (1,)

# One image token per 32 x 32 pixels (patch 16, merged 2 x 2): 4 to 256 tokens an image.
IMAGE_MIN_PIXELS = 64 * 64
IMAGE_MAX_PIXELS = 512 * 512
VIDEO_MIN_PIXELS = 64 * 64
VIDEO_MAX_PIXELS = 8 * 128 * 128
VIDEO_MAX_FRAMES = 16

DTYPE = "bfloat16"


def text_config() -> dict[str, Any]:
    return {
        "model_type": "qwen3_vl_text",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": TEXT_HIDDEN_SIZE,
        "intermediate_size": TEXT_INTERMEDIATE_SIZE,
        "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": TEXT_HEADS,
        "num_key_value_heads": TEXT_KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "tie_word_embeddings": True,
        "rope_theta": 5000000.0,
        "rope_scaling": {
            "rope_type": "default",
            "mrope_section": list(MROPE_SECTION),
            "mrope_interleaved": True,
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": TOKEN_IDS["<|endoftext|>"],
        "eos_token_id": TOKEN_IDS["<|im_end|>"],
        "dtype": DTYPE,
    }


def vision_config() -> dict[str, Any]:
    return {
        "model_type": "qwen3_vl",
        "depth": VISION_DEPTH,
        "hidden_size": VISION_HIDDEN_SIZE,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": VISION_INTERMEDIATE_SIZE,
        "num_heads": VISION_HEADS,
        "in_channels": 3,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "out_hidden_size": TEXT_HIDDEN_SIZE,
        "num_position_embeddings": NUM_POSITION_EMBEDDINGS,
        "deepstack_visual_indexes": list(DEEPSTACK_VISUAL_INDEXES),
        "initializer_range": 0.02,
    }


def model_config() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl",
        "text_config": text_config(),
        "vision_config": vision_config(),
        "image_token_id": TOKEN_IDS["<|image_pad|>"],
        "video_token_id": TOKEN_IDS["<|video_pad|>"],
        "vision_start_token_id": TOKEN_IDS["<|vision_start|>"],
        "vision_end_token_id": TOKEN_IDS["<|vision_end|>"],
        "tie_word_embeddings": True,
        "dtype": DTYPE,
    }


def generation_config() -> dict[str, Any]:
    return {
        "bos_token_id": TOKEN_IDS["<|endoftext|>"],
        "pad_token_id": TOKEN_IDS["<|endoftext|>"],
        "eos_token_id": [TOKEN_IDS["<|im_end|>"], TOKEN_IDS["<|endoftext|>"]],
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.0,
    }


def _vision_processor_common() -> dict[str, Any]:
    return {
        "patch_size": PATCH_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "merge_size": MERGE_SIZE,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "rescale_factor": 1 / 255,
        "resample": 3,
        "processor_class": "Qwen3VLProcessor",
    }


def preprocessor_config() -> dict[str, Any]:
    return {
        **_vision_processor_common(),
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "size": {"shortest_edge": IMAGE_MIN_PIXELS, "longest_edge": IMAGE_MAX_PIXELS},
    }


def video_preprocessor_config() -> dict[str, Any]:
    return {
        **_vision_processor_common(),
        "video_processor_type": "Qwen3VLVideoProcessor",
        "size": {"shortest_edge": VIDEO_MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS},
        "fps": 2,
        "min_frames": 4,
        "max_frames": VIDEO_MAX_FRAMES,
        "do_sample_frames": True,
    }


def image_tokens(width: int, height: int) -> int:
    """Image tokens the processor makes for an image already within the pixel bounds
    whose sides are multiples of 32 (no resize)."""
    factor = PATCH_SIZE * MERGE_SIZE
    if width % factor or height % factor:
        raise ValueError(f"sides must be multiples of {factor}, got {width}x{height}")
    if not IMAGE_MIN_PIXELS <= width * height <= IMAGE_MAX_PIXELS:
        raise ValueError(f"{width}x{height} is outside the processor's pixel bounds")
    return (width // factor) * (height // factor)


# Qwen3-VL-Instruct's chat template (system, user content lists with image / video
# items, assistant tool calls, tool responses).
CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n\
You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name \
and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": \
<function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Qwen2's pre-tokenizer split (contractions, letters, single digits, punctuation runs,
# newlines, spaces), then byte-level without its own regex.
_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_WORD_LINES = (
    "the a an of to and in is it that for on with as was at by be this from or are not "
    "image picture photo video frame pixel colour color red green blue yellow black white "
    "square circle line stripe left right top bottom middle corner edge background "
    "model server request response token prompt answer question user assistant system "
    "describe what where which how many there here shows contains looks like small large "
    "cat dog tree house car road sky cloud sun water river mountain person people hand "
    "one two three four five six seven eight nine ten zero hundred thousand first last "
    "Ascend Gaudi vLLM Qwen deploy service host memory cache device card rack node port "
    "hello world yes no please thank you good bad fast slow open close start stop ready "
    "time day night year today tomorrow number text word letter code data file path "
    "你好 图片 视频 模型 服务 描述 这 是 一个 的 了 在 有 和 我 你 他 们 中 大 小",
)
_WORDS = tuple(word for line in _WORD_LINES for word in line.split())
_PUNCTUATION = (".", ",", "?", "!", ":", ";", "\n", " -", " (", ")", '"', "'s")


def training_corpus(seed: int, words: int = 40000) -> list[str]:
    """Seeded pseudo-sentences; random.Random's output for an int seed is stable across
    Python versions."""
    rng = random.Random(seed)
    lines: list[str] = []
    line: list[str] = []
    for _ in range(words):
        word = rng.choice(_WORDS)
        if rng.random() < 0.08:
            word = str(rng.randrange(0, 10000))
        line.append(word.capitalize() if not line else word)
        if rng.random() < 0.1:
            line[-1] += rng.choice(_PUNCTUATION)
        if len(line) >= rng.randrange(6, 18):
            lines.append(" ".join(line))
            line = []
    lines.append(" ".join(line))
    return lines


def _build_tokenizer(out: Path, seed: int) -> None:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(training_corpus(seed), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PLAIN_ADDED_TOKENS])
    for token, index in TOKEN_IDS.items():
        if tok.token_to_id(token) != index:
            raise RuntimeError(f"{token} got id {tok.token_to_id(token)}, expected {index}")
    if tok.get_vocab_size() > VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens > {VOCAB_SIZE}")

    fast = Qwen2TokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        errors="replace",
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        model_max_length=MAX_POSITION_EMBEDDINGS,
    )
    fast.chat_template = CHAT_TEMPLATE
    # Inline in tokenizer_config.json, as the Qwen3-VL repos ship it.
    fast.save_pretrained(str(out), save_jinja_files=False)


def _build_weights(out: Path, seed: int) -> None:
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    config = Qwen3VLConfig(**{k: v for k, v in model_config().items() if k != "model_type"})
    model = Qwen3VLForConditionalGeneration(config).to(getattr(torch, DTYPE)).eval()
    model.save_pretrained(str(out), safe_serialization=True, max_shard_size="1GB")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def build(out: Path, seed: int = DEFAULT_SEED) -> dict[str, str]:
    """Writes the model directory; returns {file name: sha256}."""
    out.mkdir(parents=True, exist_ok=True)
    _build_tokenizer(out, seed)
    _build_weights(out, seed)
    _write_json(out / "generation_config.json", generation_config())
    _write_json(out / "preprocessor_config.json", preprocessor_config())
    _write_json(out / "video_preprocessor_config.json", video_preprocessor_config())
    _write_json(out / "chat_template.json", {"chat_template": CHAT_TEMPLATE})
    for path in out.iterdir():
        if path.is_file():
            path.chmod(0o644)
    return file_digests(out)


def file_digests(model_dir: Path) -> dict[str, str]:
    return {
        p.relative_to(model_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(model_dir.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(model_dir).parts
    }


def check(model_dir: Path) -> dict[str, Any]:
    """Loads the directory back through transformers' Auto classes and runs the processor on
    a small image; returns what it found."""
    import numpy as np
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor

    config = AutoConfig.from_pretrained(str(model_dir))
    processor = AutoProcessor.from_pretrained(str(model_dir))
    messages = [
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": "Describe the picture."}],
        }
    ]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    pixels = np.zeros((96, 128, 3), dtype=np.uint8)
    inputs = processor(text=[prompt], images=[Image.fromarray(pixels)], return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    return {
        "processor": type(processor).__name__,
        "image_processor": type(processor.image_processor).__name__,
        "video_processor": type(processor.video_processor).__name__,
        "architectures": config.architectures,
        "tokenizer_size": len(processor.tokenizer),
        "prompt_tokens": len(ids),
        "image_tokens": ids.count(config.image_token_id),
        "expected_image_tokens": image_tokens(128, 96),
    }


def build_in_labenv(out: Path, labenv_python: Path, seed: int = DEFAULT_SEED) -> dict[str, str]:
    """Controller side: runs ``build`` with the lab venv's interpreter."""
    from acceldeploy_lab import pythonpath

    env = dict(os.environ, PYTHONPATH=pythonpath())
    proc = subprocess.run(
        [str(labenv_python), "-m", "acceldeploy_lab.tinymodel", str(out), "--seed", str(seed)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    digests: dict[str, str] = json.loads(proc.stdout)["files"]
    return digests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="model directory to write")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--no-check", action="store_true", help="skip loading it back")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    files = build(args.out, args.seed)
    report: dict[str, Any] = {"dir": str(args.out), "seed": args.seed, "files": files}
    if not args.no_check:
        report["check"] = check(args.out)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
