import random
from pathlib import Path

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import catalog
from acceldeploy.planner.kvplan import GIB, MemoryBudget, cdiv, kv_layout, plan_kv
from acceldeploy.planner.modelconfig import load_model_arch

CONFIGS = Path(__file__).parents[1] / "data" / "configs"


def arch(name):
    return load_model_arch(CONFIGS / name)


def test_seed002_qwen3_vl_8b_tp2_block128():
    layout = kv_layout(arch("qwen3-vl-8b-instruct.json"), tp=2, block_size=128)
    assert layout.bytes_per_token == 73728
    assert plan_kv(layout, int(44.30 * GIB)).kv_cache_tokens == 645_120
    assert plan_kv(layout, int(43.54 * GIB)).kv_cache_tokens == 633_984


def test_seed001_qwen3_vl_32b_does_not_fit():
    layout = kv_layout(catalog.find("Qwen/Qwen3-VL-32B-Instruct").arch(), tp=2, block_size=128)
    plan = plan_kv(layout, 21540531712, max_model_len=262144)
    assert plan.kv_needed_bytes == 32 * GIB
    assert plan.fits is False
    assert plan.estimated_max_model_len == 164_224
    assert plan.available_gib == 20.06


def test_budget_reproduces_seed002():
    budget = MemoryBudget(
        total_bytes=int(60.96 * GIB),
        gpu_memory_utilization=0.95,
        weights_bytes=int(9.19 * GIB),
        activation_bytes=int(3.86 * GIB),
        non_torch_bytes=int(0.56 * GIB),
    )
    assert round(budget.requested_bytes / GIB, 2) == 57.91
    assert round(budget.non_kv_bytes / GIB, 2) == 13.61
    assert round(budget.available_kv_bytes / GIB, 2) == 44.30


def test_vllm_ascend_012_subtracts_other_processes():
    kwargs = dict(
        total_bytes=64 * GIB,
        gpu_memory_utilization=0.9,
        weights_bytes=10 * GIB,
        activation_bytes=2 * GIB,
        non_torch_bytes=GIB,
        other_processes_bytes=3 * GIB,
    )
    plain = MemoryBudget(**kwargs)
    ascend = MemoryBudget(**kwargs, semantics="vllm-ascend-0.12")
    assert plain.available_kv_bytes - ascend.available_kv_bytes == 3 * GIB


def test_mla_is_one_head_and_not_split_by_tp():
    a = arch("deepseek-v2-lite.json")
    assert a.is_mla and a.head_size == 576 and a.num_kv_heads == 1
    for tp in (1, 2, 4, 8):
        layout = kv_layout(a, tp=tp, block_size=16)
        assert layout.bytes_per_token == 576 * 2 * 27
        assert layout.page_size_bytes == 16 * 576 * 2


def test_gqa_heads_replicate_when_tp_exceeds_kv_heads():
    a = catalog.find("Qwen/Qwen2.5-VL-3B-Instruct").arch()
    assert a.num_kv_heads == 2 and a.head_size == 128
    assert kv_layout(a, tp=4, block_size=16).kv_heads_per_rank == 1
    assert kv_layout(a, tp=2, block_size=16).kv_heads_per_rank == 1
    assert kv_layout(a, tp=1, block_size=16).kv_heads_per_rank == 2


def test_fp16_and_fp8_kv_cache():
    a = arch("llama-3.1-8b-fp16.json")
    assert a.dtype == "float16"
    auto = kv_layout(a, tp=1, block_size=16)
    fp8 = kv_layout(a, tp=1, block_size=16, kv_cache_dtype="fp8")
    assert auto.bytes_per_token == 2 * 8 * 128 * 2 * 32
    assert fp8.bytes_per_token * 2 == auto.bytes_per_token


def test_estimate_matches_vllm_binary_search():
    rng = random.Random(7)
    a = arch("qwen3-vl-8b-instruct.json")

    def vllm_search(layout, available, current_max):
        def fits(n):
            needed = cdiv(n, layout.block_size) * layout.page_size_bytes * layout.num_layers
            return needed <= available

        if not fits(1):
            return 0
        left, right, result = 1, current_max, 1
        while left <= right:
            mid = (left + right) // 2
            if fits(mid):
                result, left = mid, mid + 1
            else:
                right = mid - 1
        return result

    for _ in range(300):
        layout = kv_layout(a, tp=rng.choice([1, 2, 4, 8]), block_size=rng.choice([16, 32, 128]))
        available = rng.randrange(0, 80 * GIB)
        upper = rng.randrange(1, 300_000)
        assert layout.estimate_max_model_len(available, upper) == vllm_search(
            layout, available, upper
        )


@pytest.mark.parametrize("tp", [3, 5, 6, 7])
def test_tp_that_does_not_divide_heads_is_refused(tp):
    with pytest.raises(AcceldeployError, match=f"TP {tp} does not divide"):
        kv_layout(arch("qwen3-vl-8b-instruct.json"), tp=tp, block_size=128)


def test_negative_memory_is_refused():
    with pytest.raises(AcceldeployError, match="weights memory must be >= 0"):
        MemoryBudget(
            total_bytes=GIB,
            gpu_memory_utilization=0.9,
            weights_bytes=-1,
            activation_bytes=0,
            non_torch_bytes=0,
        )
    layout = kv_layout(arch("qwen3-vl-8b-instruct.json"), tp=1, block_size=16)
    with pytest.raises(AcceldeployError, match="negative"):
        plan_kv(layout, -5)


def test_each_stacks_kv_rules_give_its_vllms_figures():
    """vLLM >= 0.23 logs its tokens as max concurrency x max model len, and from 0.31 the fit
    check holds back the null block (versions/stacks.yml kv_rules; kvplan.KV_RULES): equal
    to the older figures at a length that is a multiple of the block size, not otherwise."""
    from acceldeploy.planner import stacks

    arch = catalog.find("Qwen/Qwen3-VL-32B-Instruct").arch()
    old = kv_layout(arch, 1, 128)
    new = kv_layout(arch, 1, 128, rules=("tokens_per_request", "null_block"))
    available = 100 * old.page_size_bytes * old.num_layers  # exactly 100 blocks
    assert old.kv_cache_tokens(available, 2048) == new.kv_cache_tokens(available, 2048) == 12800
    # 4000 tokens take cdiv(4000, 128) = 32 blocks: 100 / 32 x 4000 = 12500, not 12800
    assert old.kv_cache_tokens(available, 4000) == 12800
    assert new.kv_cache_tokens(available, 4000) == 12500
    assert plan_kv(new, available, 4000).kv_cache_tokens == 12500
    # 100 blocks: a request of 100 blocks fits the old rule; the new holds one back
    assert old.fits(available, 100 * 128) and not new.fits(available, 100 * 128)
    assert new.fits(available, 99 * 128)
    assert old.estimate_max_model_len(available, 10**6) == 12800
    assert new.estimate_max_model_len(available, 10**6) == 99 * 128
    every = stacks.load_stacks()
    assert not every["cpu-vllm-0.12.0"].get("kv_rules")
    assert every["cpu-vllm-0.32.0"]["kv_rules"] == ["tokens_per_request", "null_block"]
    assert every["ascend-vllm-0.23.0"]["kv_rules"] == ["tokens_per_request"]


def test_an_unknown_kv_rule_is_refused_naming_the_known(tmp_path: Path):
    import yaml

    from acceldeploy.planner import stacks

    data = yaml.safe_load(stacks.STACKS_FILE.read_text())
    data["stacks"]["cpu-vllm-0.32.0"]["kv_rules"] = ["null_blocks"]
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        AcceldeployError, match="kv_rules null_blocks unknown; use tokens_per_request"
    ):
        stacks.load_stacks(path)
