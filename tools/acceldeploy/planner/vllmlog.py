"""Read the memory budget out of a vLLM / vllm-ascend start-up log and say what to change.

Formats: vLLM >= 0.11 profiling summary ("Total non KV cache memory: ...; torch peak memory
increase: ...; non-torch forward increase memory: ...; weights memory: ..."), "Available KV
cache memory", "GPU KV cache size" (vLLM 0.32 on CPU: "CPU KV cache size", on the line of
"Maximum concurrency"), "Maximum concurrency", the not-enough-KV ValueError;
vllm-ascend 0.12 ("Loading model weights took X GB", "Available memory: N, total memory: M",
in bytes or GiB, possibly split over two lines).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.kvplan import GIB

NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
UNIT = r"\s*(GiB|GB|G|B)?"


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _gib(value: str, unit: str | None) -> float:
    number = _num(value)
    if unit in (None, "B") and number > 1 << 20:
        return number / GIB
    return number


PATTERNS: dict[str, str] = {
    "non_kv_gib": rf"Total non KV cache memory:\s*{NUM}{UNIT}",
    "activation_gib": rf"torch peak memory increase:\s*{NUM}{UNIT}",
    "non_torch_gib": rf"non-torch forward increase memory:\s*{NUM}{UNIT}",
    "weights_gib": rf"weights memory:\s*{NUM}{UNIT}",
    "kv_gib": rf"Available KV cache memory:\s*{NUM}{UNIT}",
    "requested_gib": rf"[Rr]equested memory:\s*(?:[0-9.]+\s*\(util\),\s*)?{NUM}{UNIT}",
    "initial_free_gib": rf"Initial free memory:?\s*{NUM}{UNIT}",
    "legacy_kv_gib": rf"Available memory:\s*{NUM}{UNIT}|kv_cache_size={NUM}{UNIT}",
    "total_gib": rf"total(?: memory:\s*|_gpu_memory=){NUM}{UNIT}",
    "legacy_weights_gib": rf"(?:Loading model weights|Model loading) took\s*{NUM}{UNIT}",
    "needed_gib": r"\(([0-9.]+) GiB KV cache is needed",
    "error_available_gib": r"available KV cache memory \(([0-9.]+) GiB\)",
}
INTS: dict[str, str] = {
    "kv_cache_tokens": rf"[CGN]PU KV cache size:\s*{NUM} tokens",
    "estimated_max_model_len": r"estimated maximum model length is\s*([0-9,]+)",
    "max_model_len": r"max seq len \(([0-9]+)\)|max_seq_len=([0-9]+)|"
    r"Maximum concurrency for ([0-9,]+) tokens",
    "num_gpu_blocks": r"GPU blocks:\s*([0-9]+)",
    "block_size": r"block_size=([0-9]+)",
    "v0_max_tokens": r"tokens that can be stored in KV cache \(([0-9]+)\)",
    "tensor_parallel_size": r"tensor_parallel_size=([0-9]+)",
}
UTIL = r"Requested memory:\s*([0-9.]+)\s*\(util\)|gpu_memory_utilization=([0-9.]+)"
CONCURRENCY = r"Maximum concurrency for [0-9,]+ tokens per request:\s*([0-9.]+)x"


@dataclass
class Budget:
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    non_kv_gib: float | None = None
    kv_gib: float | None = None
    total_gib: float | None = None
    requested_gib: float | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_tokens: int | None = None
    max_model_len: int | None = None
    kv_needed_gib: float | None = None
    fits: bool | None = None
    estimated_max_model_len: int | None = None
    max_concurrency: float | None = None
    tensor_parallel_size: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    v0_max_tokens: int | None = None
    advice: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            k: round(v, 2) if isinstance(v, float) else v
            for k, v in asdict(self).items()
            if v is not None
        }


def _first(pattern: str, text: str) -> re.Match[str] | None:
    return re.search(pattern, text)


def _all_gib(pattern: str, text: str) -> list[float]:
    """Every figure the pattern finds; alternatives are (number, unit) group pairs."""
    values = []
    for m in re.finditer(pattern, text):
        groups = [*m.groups(), None]
        i = next(i for i, g in enumerate(groups) if g is not None)
        values.append(_gib(str(groups[i]), groups[i + 1]))
    return values


def parse_log(text: str) -> Budget:
    text = re.sub(r",?\s*\n\s*(total memory:)", r", \1", text)
    found: dict[str, float] = {}
    for key, pattern in PATTERNS.items():
        values = _all_gib(pattern, text)
        if values:
            # Each TP rank logs its own figure; vLLM sizes every rank by the smallest.
            found[key] = min(values) if "kv" in key else values[0]
    b = Budget()
    b.weights_gib = found.get("weights_gib", found.get("legacy_weights_gib"))
    b.activation_gib = found.get("activation_gib")
    b.non_torch_gib = found.get("non_torch_gib")
    b.non_kv_gib = found.get("non_kv_gib")
    b.kv_gib = found.get("kv_gib", found.get("error_available_gib", found.get("legacy_kv_gib")))
    b.total_gib = found.get("total_gib")
    b.requested_gib = found.get("requested_gib")
    b.kv_needed_gib = found.get("needed_gib")
    for key, pattern in INTS.items():
        m = _first(pattern, text)
        if m:
            setattr(b, key, int(_num(next(g for g in m.groups() if g))))
    m = _first(UTIL, text)
    if m:
        b.gpu_memory_utilization = float(next(g for g in m.groups() if g))
    m = _first(CONCURRENCY, text)
    if m:
        b.max_concurrency = float(m.group(1))
    _derive(b)
    if all(
        getattr(b, k) is None
        for k in ("weights_gib", "kv_gib", "non_kv_gib", "kv_cache_tokens", "kv_needed_gib")
    ):
        raise AcceldeployError(
            "no vLLM memory figures found in the log; start vLLM with VLLM_LOGGING_LEVEL=DEBUG "
            "and give the start-up log up to 'GPU KV cache size' or the error"
        )
    return b


def _derive(b: Budget) -> None:
    parts = (b.weights_gib, b.activation_gib, b.non_torch_gib)
    if b.non_kv_gib is None and None not in parts:
        b.non_kv_gib = round(sum(p for p in parts if p is not None), 2)
    if b.requested_gib is None and b.total_gib and b.gpu_memory_utilization:
        b.requested_gib = round(b.total_gib * b.gpu_memory_utilization, 2)
    if b.kv_gib is None and b.requested_gib is not None and b.non_kv_gib is not None:
        b.kv_gib = round(b.requested_gib - b.non_kv_gib, 2)
    if b.kv_cache_tokens is None and b.num_gpu_blocks is not None:
        # vLLM V0 logged blocks, not tokens; its CUDA block size was 16 unless configured.
        b.kv_cache_tokens = b.num_gpu_blocks * (b.block_size or 16)
    if b.v0_max_tokens is not None:
        b.estimated_max_model_len = b.v0_max_tokens
        b.fits = False
    elif b.kv_needed_gib is not None and b.kv_gib is not None:
        b.fits = b.kv_needed_gib <= b.kv_gib
    elif b.kv_cache_tokens is not None and b.max_model_len is not None:
        b.fits = b.kv_cache_tokens >= b.max_model_len
    if b.estimated_max_model_len is None and b.kv_cache_tokens is not None:
        b.estimated_max_model_len = b.kv_cache_tokens
    b.advice = advise(b)


def advise(b: Budget) -> list[str]:
    if b.fits is not False:
        return []
    advice = []
    if b.estimated_max_model_len:
        advice.append(f"lower --max-model-len to {b.estimated_max_model_len} or less")
    if b.kv_needed_gib is not None and b.kv_gib is not None and b.total_gib:
        shortfall = b.kv_needed_gib - b.kv_gib
        if b.gpu_memory_utilization is not None:
            target = b.gpu_memory_utilization + shortfall / b.total_gib
            if target <= 0.98:
                advice.append(f"raise --gpu-memory-utilization to {target:.2f}")
            else:
                advice.append(f"utilization alone cannot fit it (would need {target:.2f} > 0.98)")
        else:
            advice.append(
                f"raise --gpu-memory-utilization by {shortfall / b.total_gib:.2f} "
                f"({shortfall:.2f} GiB more per device)"
            )
    tp = b.tensor_parallel_size
    more = f"TP {tp * 2}" if tp else "twice the devices (TP)"
    advice.append(
        f"add devices: {more} halves the KV cache per token and the weights on each device "
        "(while the model's key/value heads are at least the TP size)"
    )
    return advice
