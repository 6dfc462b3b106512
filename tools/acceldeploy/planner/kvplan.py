"""KV cache arithmetic, exactly as vLLM 0.12 does it (vllm/v1/core/kv_cache_utils.py).

One uniform full-attention (or MLA) spec per layer:
  page_size   = (2 | 1 for MLA) * block_size * kv_heads_per_rank * head_size * dtype_bytes
  num_blocks  = available // page_size // num_layers
  tokens      = num_blocks * block_size
  needed(L)   = cdiv(L, block_size) * page_size * num_layers
  estimate    = largest L <= max_model_len with needed(L) <= available
  concurrency = num_blocks / cdiv(L, block_size)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.modelconfig import DTYPE_BYTES, KV_CACHE_DTYPE_BYTES, ModelArch

GIB = 1 << 30

BUDGET_SEMANTICS = ("vllm", "vllm-ascend-0.12")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check_tensor_parallel(arch: ModelArch, tp: int) -> None:
    """Reject a TP size vLLM would refuse, with the sizes that would work."""
    if tp < 1:
        raise AcceldeployError(f"tensor parallel size must be >= 1, got {tp}")
    valid = [n for n in range(1, arch.num_attention_heads + 1) if _tp_ok(arch, n)]
    if not _tp_ok(arch, tp):
        raise AcceldeployError(
            f"TP {tp} does not divide the model's heads "
            f"(attention {arch.num_attention_heads}, key/value {arch.num_kv_heads}); "
            f"use one of {', '.join(str(n) for n in valid if n <= 16)}"
        )


def _tp_ok(arch: ModelArch, tp: int) -> bool:
    if arch.num_attention_heads % tp:
        return False
    if arch.is_mla:
        return True
    kv = arch.num_kv_heads
    return kv % tp == 0 if kv >= tp else tp % kv == 0


# Where vLLM versions do the KV arithmetic differently (a stack's kv_rules, versions/stacks.yml):
#   tokens_per_request: the logged "KV cache size: N tokens" is int(max concurrency x max model
#     len) (vLLM >= 0.23, v1/core/kv_cache_utils.py get_kv_cache_capacity), not num_blocks x
#     block_size: the two differ when the length is not a multiple of the block size;
#   null_block: the fit check and the estimated max model len leave out the one block the
#     block pool holds back (vLLM >= 0.31, check_enough_kv_cache_memory).
KV_RULES = ("tokens_per_request", "null_block")


@dataclass(frozen=True)
class KVLayout:
    """The per-rank KV cache geometry of one model at one TP size, and the KV rules of the
    vLLM that runs it (KV_RULES)."""

    num_layers: int
    kv_heads_per_rank: int
    head_size: int
    element_bytes: int
    block_size: int
    is_mla: bool
    rules: frozenset[str] = frozenset()

    @property
    def page_size_bytes(self) -> int:
        kv_planes = 1 if self.is_mla else 2
        return (
            kv_planes
            * self.block_size
            * self.kv_heads_per_rank
            * self.head_size
            * self.element_bytes
        )

    @property
    def bytes_per_token(self) -> int:
        """Bytes of KV cache one token takes on one rank, all layers together."""
        return self.page_size_bytes * self.num_layers // self.block_size

    def num_blocks(self, available_bytes: int) -> int:
        return max(int(available_bytes // self.page_size_bytes // self.num_layers), 0)

    def kv_cache_tokens(self, available_bytes: int, max_model_len: int | None = None) -> int:
        """The token count vLLM logs ("KV cache size: N tokens")."""
        if "tokens_per_request" in self.rules and max_model_len:
            return int(self.max_concurrency(available_bytes, max_model_len) * max_model_len)
        return self.num_blocks(available_bytes) * self.block_size

    def needed_bytes(self, max_model_len: int) -> int:
        return cdiv(max_model_len, self.block_size) * self.page_size_bytes * self.num_layers

    def usable_blocks(self, available_bytes: int) -> int:
        """The blocks one request can use: all of them, or all but the null block."""
        held = 1 if "null_block" in self.rules else 0
        return max(self.num_blocks(available_bytes) - held, 0)

    def fits(self, available_bytes: int, max_model_len: int) -> bool:
        """vLLM's start-up check that one request of max_model_len fits."""
        if "null_block" in self.rules:
            return cdiv(max_model_len, self.block_size) <= self.usable_blocks(available_bytes)
        return self.needed_bytes(max_model_len) <= available_bytes

    def estimate_max_model_len(self, available_bytes: int, upper: int) -> int:
        """vLLM's binary search over [1, upper], in closed form (needed() is a step)."""
        return min(upper, self.usable_blocks(available_bytes) * self.block_size)

    def max_concurrency(self, available_bytes: int, max_model_len: int) -> float:
        return self.num_blocks(available_bytes) / cdiv(max_model_len, self.block_size)


def kv_layout(
    arch: ModelArch,
    tp: int,
    block_size: int,
    kv_cache_dtype: str = "auto",
    dtype: str = "auto",
    pp: int = 1,
    rules: tuple[str, ...] = (),
) -> KVLayout:
    """Per rank: KV heads split by TP, layers by PP (vLLM gives a stage ceil(layers / PP));
    `rules`: the stack's KV_RULES."""
    check_tensor_parallel(arch, tp)
    if block_size < 1:
        raise AcceldeployError(f"block size must be >= 1, got {block_size}")
    if kv_cache_dtype == "auto":
        if dtype == "auto":
            element_bytes = arch.dtype_bytes()
        elif dtype in DTYPE_BYTES:
            element_bytes = DTYPE_BYTES[dtype]
        else:
            raise AcceldeployError(f"dtype {dtype!r} is not one of auto, {', '.join(DTYPE_BYTES)}")
    elif kv_cache_dtype in KV_CACHE_DTYPE_BYTES:
        element_bytes = KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    else:
        raise AcceldeployError(
            f"kv cache dtype {kv_cache_dtype!r} is not one of auto, "
            f"{', '.join(KV_CACHE_DTYPE_BYTES)}"
        )
    heads = 1 if arch.is_mla else max(1, arch.num_kv_heads // tp)
    return KVLayout(
        num_layers=-(-arch.num_layers // pp),
        kv_heads_per_rank=heads,
        head_size=arch.head_size,
        element_bytes=element_bytes,
        block_size=block_size,
        is_mla=arch.is_mla,
        rules=frozenset(rules),
    )


@dataclass(frozen=True)
class MemoryBudget:
    """Device memory on one rank, in bytes, as vLLM's worker splits it.

    vLLM >= 0.11 and vllm-ascend >= 0.15: available = total * utilization - non_kv.
    vllm-ascend 0.12.0rc1 also subtracts what other processes held on the device at
    start-up (total - free), so a card shared with another process loses that memory twice.
    """

    total_bytes: int
    gpu_memory_utilization: float
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    other_processes_bytes: int = 0
    semantics: str = "vllm"

    def __post_init__(self) -> None:
        for name in (
            "total_bytes",
            "weights_bytes",
            "activation_bytes",
            "non_torch_bytes",
            "other_processes_bytes",
        ):
            if getattr(self, name) < 0:
                raise AcceldeployError(f"{name.removesuffix('_bytes')} memory must be >= 0")
        if self.total_bytes == 0:
            raise AcceldeployError("total device memory must be > 0")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise AcceldeployError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.semantics not in BUDGET_SEMANTICS:
            raise AcceldeployError(
                f"budget semantics {self.semantics!r} is not one of {', '.join(BUDGET_SEMANTICS)}"
            )

    @property
    def requested_bytes(self) -> float:
        return self.total_bytes * self.gpu_memory_utilization

    @property
    def non_kv_bytes(self) -> int:
        return self.weights_bytes + self.activation_bytes + self.non_torch_bytes

    @property
    def available_kv_bytes(self) -> int:
        available = self.requested_bytes - self.non_kv_bytes
        if self.semantics == "vllm-ascend-0.12":
            available -= self.other_processes_bytes
        return int(available)

    def utilization_for(self, kv_bytes: int) -> float:
        """The gpu_memory_utilization that would leave kv_bytes for the KV cache."""
        extra = self.other_processes_bytes if self.semantics == "vllm-ascend-0.12" else 0
        return (self.non_kv_bytes + extra + kv_bytes) / self.total_bytes


@dataclass(frozen=True)
class KVPlan:
    bytes_per_token: int
    page_size_bytes: int
    kv_heads_per_rank: int
    head_size: int
    num_layers: int
    block_size: int
    available_bytes: int
    available_gib: float
    num_blocks: int
    kv_cache_tokens: int
    max_model_len: int | None = None
    kv_needed_bytes: int | None = None
    kv_needed_gib: float | None = None
    fits: bool | None = None
    estimated_max_model_len: int | None = None
    max_concurrency: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def plan_kv(layout: KVLayout, available_bytes: int, max_model_len: int | None = None) -> KVPlan:
    if available_bytes < 0:
        raise AcceldeployError(
            f"available KV cache memory is negative ({available_bytes / GIB:.2f} GiB): "
            "the non-KV memory exceeds total x gpu_memory_utilization"
        )
    fields: dict[str, Any] = {}
    if max_model_len is not None:
        if max_model_len < 1:
            raise AcceldeployError(f"max model len must be >= 1, got {max_model_len}")
        needed = layout.needed_bytes(max_model_len)
        fields = {
            "max_model_len": max_model_len,
            "kv_needed_bytes": needed,
            "kv_needed_gib": round(needed / GIB, 2),
            "fits": layout.fits(available_bytes, max_model_len),
            "estimated_max_model_len": layout.estimate_max_model_len(
                available_bytes, max_model_len
            ),
            "max_concurrency": round(layout.max_concurrency(available_bytes, max_model_len), 2),
        }
    return KVPlan(
        bytes_per_token=layout.bytes_per_token,
        page_size_bytes=layout.page_size_bytes,
        kv_heads_per_rank=layout.kv_heads_per_rank,
        head_size=layout.head_size,
        num_layers=layout.num_layers,
        block_size=layout.block_size,
        available_bytes=available_bytes,
        available_gib=round(available_bytes / GIB, 2),
        num_blocks=layout.num_blocks(available_bytes),
        kv_cache_tokens=layout.kv_cache_tokens(available_bytes, max_model_len),
        **fields,
    )


def largest_fitting_len(layout: KVLayout, available_bytes: int, ceiling: int, step: int) -> int:
    """The largest multiple of `step` up to `ceiling` whose KV cache fits (0 if none)."""
    fit = layout.estimate_max_model_len(available_bytes, ceiling)
    return fit if fit == ceiling else fit - fit % step
