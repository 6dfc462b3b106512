"""Read a Hugging Face config.json into the numbers vLLM sizes its KV cache with.

Mirrors vLLM 0.12's ModelConfig: the text config of multimodal models, head_dim explicit
or hidden_size // num_attention_heads, GQA key/value heads, DeepSeek-style MLA (one
latent head of kv_lora_rank + qk_rope_head_dim). Sliding-window, chunked-local and hybrid
(Mamba / linear attention) models are refused: their KV cache is not one uniform spec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy.errors import AcceldeployError

# model_type values vLLM 0.12 treats as DeepSeek MLA (ModelConfig.is_deepseek_mla).
MLA_MODEL_TYPES = frozenset(
    {"deepseek_v2", "deepseek_v3", "deepseek_mtp", "kimi_k2", "pangu_ultra_moe"}
)

# Decoder families whose every layer is full attention with one uniform KV spec.
FULL_ATTENTION_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen3_vl_text",
        "qwen3_vl_moe_text",
        "qwen2_vl_text",
        "qwen2_5_vl_text",
        "llava",
        "llava_next",
        "internlm2",
        "baichuan",
        "yi",
        "phi3",
        "gemma",
        "glm",
        "glm4",
        "chatglm",
        "deepseek",
        "granite",
        "olmo2",
        "minicpm",
        "internvl_chat",
        *MLA_MODEL_TYPES,
    }
)

UNSUPPORTED_HINT = (
    "sliding-window, chunked-local and hybrid (Mamba / linear attention) models are not "
    "sized yet; read the KV cache size from vLLM's start-up log (plan.py explain) instead"
)

DTYPE_BYTES = {
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float32": 2,  # vLLM's --dtype auto serves fp32 checkpoints in 16-bit
    "float": 2,
}
# vLLM's --kv-cache-dtype values the planner sizes (bfloat16: vLLM 0.12's STR_DTYPE_TO_TORCH_DTYPE).
KV_CACHE_DTYPE_BYTES = {
    "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "int8": 1,
}  # fmt: skip


@dataclass(frozen=True)
class ModelArch:
    """The attention geometry of a model's language part, as vLLM sizes it."""

    model_type: str
    architectures: tuple[str, ...]
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str
    is_mla: bool
    max_position_embeddings: int | None
    is_multimodal: bool

    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


def load_config_json(path: str | Path) -> dict[str, Any]:
    """Load config.json from a file or a model directory."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise AcceldeployError(f"model config not found: {p} (give a config.json or a model dir)")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AcceldeployError(f"cannot read model config {p}: {exc}") from None
    if not isinstance(data, dict):
        raise AcceldeployError(f"model config {p} is not a JSON object")
    return data


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a (possibly multimodal) config."""
    for key in ("text_config", "llm_config", "language_config"):
        sub = config.get(key)
        if isinstance(sub, dict) and sub:
            return sub
    return config


def _positive_int(cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise AcceldeployError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    return value


def _refuse_non_uniform(cfg: dict[str, Any], where: str) -> None:
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        kinds = sorted({str(t) for t in layer_types})
        raise AcceldeployError(f"{where}: layer types {kinds}; {UNSUPPORTED_HINT}")
    window = cfg.get("sliding_window")
    if isinstance(window, int) and window > 0 and cfg.get("use_sliding_window", True):
        raise AcceldeployError(f"{where}: sliding_window={window}; {UNSUPPORTED_HINT}")
    for key in ("attention_chunk_size", "mamba_d_state", "ssm_cfg", "linear_attn_config"):
        if cfg.get(key):
            raise AcceldeployError(f"{where}: has {key}; {UNSUPPORTED_HINT}")


def parse_model_arch(
    config: dict[str, Any], where: str = "model config", trust_arch: bool = False
) -> ModelArch:
    """Turn a config.json dict into a ModelArch, or explain why it cannot be sized."""
    tcfg = text_config(config)
    model_type = str(tcfg.get("model_type") or config.get("model_type") or "")
    architectures = tuple(str(a) for a in config.get("architectures") or ())
    if model_type not in FULL_ATTENTION_MODEL_TYPES and not trust_arch:
        name = architectures[0] if architectures else model_type or "unknown"
        raise AcceldeployError(
            f"{where}: cannot size architecture {name} (model_type {model_type!r}); "
            f"known: {', '.join(sorted(FULL_ATTENTION_MODEL_TYPES))}. If it is a plain "
            "full-attention decoder, pass --trust-arch"
        )
    _refuse_non_uniform(tcfg, where)

    num_layers = _positive_int(tcfg, "num_hidden_layers", where)
    num_heads = _positive_int(tcfg, "num_attention_heads", where)
    is_mla = model_type in MLA_MODEL_TYPES and tcfg.get("kv_lora_rank") is not None
    if is_mla:
        head_size = _positive_int(tcfg, "kv_lora_rank", where) + int(
            tcfg.get("qk_rope_head_dim") or 0
        )
        num_kv_heads = 1
    else:
        if tcfg.get("head_dim") is not None:
            head_size = _positive_int(tcfg, "head_dim", where)
        else:
            head_size = _positive_int(tcfg, "hidden_size", where) // num_heads
        kv = tcfg.get("num_key_value_heads")
        num_kv_heads = (
            num_heads if kv is None else _positive_int(tcfg, "num_key_value_heads", where)
        )

    dtype = str(
        tcfg.get("torch_dtype")
        or tcfg.get("dtype")
        or config.get("torch_dtype")
        or config.get("dtype")
        or "bfloat16"
    )
    if dtype not in DTYPE_BYTES:
        raise AcceldeployError(
            f"{where}: dtype {dtype!r} is not one of {', '.join(sorted(DTYPE_BYTES))}"
        )
    max_pos = tcfg.get("max_position_embeddings")
    return ModelArch(
        model_type=model_type,
        architectures=architectures,
        num_layers=num_layers,
        num_attention_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        dtype=dtype,
        is_mla=is_mla,
        max_position_embeddings=max_pos if isinstance(max_pos, int) else None,
        is_multimodal=tcfg is not config or "vision_config" in config,
    )


def load_model_arch(path: str | Path, trust_arch: bool = False) -> ModelArch:
    return parse_model_arch(load_config_json(path), where=str(path), trust_arch=trust_arch)
