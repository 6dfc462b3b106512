"""Gaudi bucketing: HabanaAI/vllm-fork scripts/utils.sh set_linear_bucketing, worked by hand."""

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.serving import gaudi_launch


def test_seed004_qwen2_72b_example():
    # seed 004, 2.2: -b 128 -i 800,1024 -o 400,512 -t 8192
    shape = gaudi_launch.Shape(800, 1024, 400, 512, max_num_seqs=128, max_num_batched_tokens=8192)
    env = gaudi_launch.linear_bucketing(shape)
    assert env == {
        "VLLM_EXPONENTIAL_BUCKETING": "false",
        "VLLM_PROMPT_BS_BUCKET_MIN": "1",
        "VLLM_PROMPT_BS_BUCKET_STEP": "1",
        "VLLM_PROMPT_BS_BUCKET_MAX": "9",  # 8192 // ceil(800, 128)=896
        "VLLM_PROMPT_SEQ_BUCKET_MIN": "896",
        "VLLM_PROMPT_SEQ_BUCKET_STEP": "128",
        "VLLM_PROMPT_SEQ_BUCKET_MAX": "1024",
        "VLLM_DECODE_BS_BUCKET_MIN": "1",
        "VLLM_DECODE_BS_BUCKET_STEP": "8",  # min(ceil_div(128, 16), 16)
        "VLLM_DECODE_BS_BUCKET_MAX": "128",
        "VLLM_DECODE_BLOCK_BUCKET_MIN": "1",  # ceil_div(ceil_div(800, 128), 128)
        "VLLM_DECODE_BLOCK_BUCKET_STEP": "128",
        "VLLM_DECODE_BLOCK_BUCKET_MAX": "1664",  # ceil((ceil_div(1536, 128) + 1) * 128, 128)
    }


def test_small_batch_and_clamps():
    # -b 24 -i 4,38912 -o 4,2048 -t 40960 (seed 004's QwQ-32B)
    shape = gaudi_launch.Shape(4, 38912, 4, 2048, max_num_seqs=24, max_num_batched_tokens=40960)
    env = gaudi_launch.linear_bucketing(shape)
    assert env["VLLM_PROMPT_BS_BUCKET_MAX"] == "24"  # min(40960 // 128, 24)
    assert env["VLLM_PROMPT_SEQ_BUCKET_MIN"] == "128"
    assert env["VLLM_PROMPT_SEQ_BUCKET_MAX"] == "38912"
    assert env["VLLM_DECODE_BS_BUCKET_STEP"] == "2"  # ceil_div(24, 16)
    assert env["VLLM_DECODE_BS_BUCKET_MAX"] == "24"
    # (ceil_div(40960, 128) + 1) * 24 = 7704 -> 7808
    assert env["VLLM_DECODE_BLOCK_BUCKET_MAX"] == "7808"
    tiny = gaudi_launch.Shape(4096, 4096, 4, 16, max_num_seqs=1, max_num_batched_tokens=1024)
    assert gaudi_launch.linear_bucketing(tiny)["VLLM_PROMPT_BS_BUCKET_MAX"] == "1"  # max(.., 1)


def test_service_env_padding_cache_and_collectives():
    equal = gaudi_launch.Shape(1024, 1024, 4, 512, 32, 8192)
    env = gaudi_launch.service_env(equal, [0, 1], "/var/cache/x/hpu-recipes")
    assert env["VLLM_ZERO_PADDING"] == "false"  # the script's in_min == in_max rule
    assert env["PT_HPU_ENABLE_LAZY_COLLECTIVES"] == "true"
    assert env["PT_HPU_RECIPE_CACHE_CONFIG"] == "/var/cache/x/hpu-recipes,false,16384"
    single = gaudi_launch.service_env(gaudi_launch.Shape(4, 1024, 4, 512, 32, 8192), [3], "/c")
    assert single["VLLM_ZERO_PADDING"] == "true"
    assert "PT_HPU_ENABLE_LAZY_COLLECTIVES" not in single


def test_shape_defaults_from_max_model_len_and_options():
    options = {"max-num-seqs": 16, "max_num_batched_tokens": "4096"}
    shape = gaudi_launch.shape_for("svc", 32768, options, None, 128)
    assert (shape.input_min, shape.input_max) == (4, 30720)
    assert (shape.output_min, shape.output_max) == (4, 2048)
    assert (shape.max_num_seqs, shape.max_num_batched_tokens) == (16, 4096)
    assert gaudi_launch.engine_options(options, shape) == {}
    short = gaudi_launch.shape_for("svc", 2048, {}, None, 128)
    assert (short.input_max, short.output_max) == (1024, 1024)
    assert gaudi_launch.engine_options({}, short) == {
        "max-num-seqs": 128,
        "max-num-batched-tokens": 8192,
    }
    given = gaudi_launch.shape_for(
        "svc", 8192, {}, {"input": [800, 1024], "output": [400, 512]}, 128
    )
    assert (given.input_min, given.input_max, given.output_max) == (800, 1024, 512)


@pytest.mark.parametrize(
    ("spec", "length", "message"),
    [
        ({"input": [4, 8000], "output": [4, 512]}, 8192, "exceeds max_model_len 8192"),
        ({"input": [10, 4]}, 8192, "must be [min, max]"),
        ({"inputs": [4, 10]}, 8192, "unknown keys"),
    ],
)
def test_bad_shapes(spec, length, message):
    with pytest.raises(AcceldeployError, match=message.replace("[", r"\[").replace("]", r"\]")):
        gaudi_launch.shape_for("svc", length, {}, spec, 128)


def test_docker_argv_passes_env_by_name_only():
    argv = gaudi_launch.docker_argv(
        "svc",
        "img:1",
        ["A", "VLLM_API_KEY"],
        [("/models", "/models", False)],
        ["vllm", "serve", "/models/x"],
        ("--runtime=habana",),
        cpuset=("0-23", 0),
    )
    assert argv[:5] == ["/usr/bin/docker", "run", "--rm", "--init", "--name=acceldeploy-svc"]
    assert "--runtime=habana" in argv and "--cpuset-cpus=0-23" in argv
    assert "--cpuset-mems=0" in argv
    assert argv[argv.index("VLLM_API_KEY") - 1 : argv.index("VLLM_API_KEY") + 1] == [
        "-e",
        "VLLM_API_KEY",
    ]
    assert argv[-4:] == ["img:1", "vllm", "serve", "/models/x"]
    with pytest.raises(AcceldeployError, match="vllm_service_gaudi_image"):
        gaudi_launch.docker_argv("svc", "", [], [], [], ())


def test_each_stack_selects_linear_buckets_under_its_own_switch():
    """vllm-gaudi 0.26 reads VLLM_BUCKETING_STRATEGY (VLLM_EXPONENTIAL_BUCKETING deprecated);
    the fork and 0.13.0 read the old switch. The ranges are the same either way."""
    from acceldeploy.planner import stacks

    every = stacks.load_stacks()
    shape = gaudi_launch.Shape(800, 1024, 400, 512, max_num_seqs=128, max_num_batched_tokens=8192)
    new = gaudi_launch.linear_bucketing(shape, stacks.bucketing(every["gaudi-vllm-0.26.0"]))
    old = gaudi_launch.linear_bucketing(shape, stacks.bucketing(every["gaudi-vllm-0.13.0"]))
    assert new.pop("VLLM_BUCKETING_STRATEGY") == "lin" and "VLLM_EXPONENTIAL_BUCKETING" not in new
    assert old.pop("VLLM_EXPONENTIAL_BUCKETING") == "false"
    assert new == old and new["VLLM_PROMPT_QUERY_BUCKET_MAX"] == "1024"
