"""Golden argv/env for the example inventories, and the inventory checks."""

from pathlib import Path

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving.hostplan import host_launches

ROOT = Path(__file__).resolve().parents[2]


def test_ascend_910b_qwen3_vl_32b_golden():
    (launch,) = host_launches(host_vars(str(ROOT / "inventory/examples/ascend-910b"), "npu-01"))
    assert launch.argv == [
        "/opt/miniforge3/envs/vllm-v0.12.0/bin/vllm",
        "serve",
        "/models/Qwen/Qwen3-VL-32B-Instruct@master",
        "--served-model-name",
        "qwen3-vl",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "16384",
        "--gpu-memory-utilization",
        "0.97",
        "--limit-mm-per-prompt",
        '{"video":0}',
        "--dtype",
        "bfloat16",
        "--max-num-seqs",
        "4",
        "--mm-processor-cache-gb",
        "0",
    ]
    assert launch.env == {
        "ASCEND_RT_VISIBLE_DEVICES": "2,3",
        "CPU_AFFINITY_CONF": "1",
        "HCCL_OP_EXPANSION_MODE": "AIV",
        "HF_HUB_OFFLINE": "1",
        "PYTHONFAULTHANDLER": "1",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "TASK_QUEUE_ENABLE": "2",
        "VLLM_ASCEND_ENABLE_NZ": "0",
    }
    assert launch.device_paths == [
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/dev/davinci2",
        "/dev/davinci3",
    ]


def test_gaudi2_qwen25_vl_golden():
    (launch,) = host_launches(host_vars(str(ROOT / "inventory/examples/gaudi2"), "hpu-01"))
    assert launch.command_line() == (
        "vllm serve /models/Qwen/Qwen2.5-VL-7B-Instruct@master --served-model-name qwen2-5-vl "
        "--host 127.0.0.1 --port 8000 --tensor-parallel-size 1 --max-model-len 32768 "
        '--gpu-memory-utilization 0.9 --limit-mm-per-prompt \'{"image":5,"video":5}\' '
        "--dtype bfloat16 --max-num-seqs 128 --max-num-batched-tokens 8192"
    )
    # the bucketing is sized for those two (the fork's preferred 128 / 8192) and block 128
    assert launch.env["VLLM_DECODE_BS_BUCKET_MAX"] == "128"
    assert launch.env["VLLM_PROMPT_SEQ_BUCKET_STEP"] == "128"
    assert launch.env["HABANA_VISIBLE_MODULES"] == "0"
    assert launch.env["PT_HPU_LAZY_MODE"] == "1"


def base(**service):
    return {
        "acceldeploy_platform": "ascend",
        "acceldeploy_services": [
            {"name": "qwen3-vl", "model": "Qwen/Qwen3-VL-8B-Instruct", "devices": [0, 1], **service}
        ],
    }


def test_auto_max_model_len_is_largest_fitting_multiple_of_1024():
    (launch,) = host_launches(base(gpu_memory_utilization=0.95))
    assert launch.max_model_len % 1024 == 0
    assert launch.kv["needed_gib"] <= launch.kv["available_gib"]


def test_api_key_never_reaches_argv_or_env():
    (launch,) = host_launches(base(api_key="sk-secret"))
    assert launch.secret_env == ["VLLM_API_KEY"]
    assert "sk-secret" not in repr(launch.to_dict())


def test_a_gaudi_service_is_checked_against_the_forks_options():
    hv = host_vars(str(ROOT / "inventory/examples/gaudi2"), "hpu-01")
    service = {**hv["acceldeploy_services"][0], "extra_args": {"mm-processor-cache-gb": 0}}
    with pytest.raises(AcceldeployError, match="not an option of vllm-fork"):
        host_launches({**hv, "acceldeploy_services": [service]})
    fork_only = {**service, "extra_args": {"use-padding-aware-scheduling": True}}
    (launch,) = host_launches({**hv, "acceldeploy_services": [fork_only]})
    assert "--use-padding-aware-scheduling" in launch.argv


@pytest.mark.parametrize(
    ("hostvars", "message"),
    [
        (
            {"acceldeploy_platform": "tpu", "acceldeploy_services": []},
            "acceldeploy_platform 'tpu' is unknown",
        ),
        (base(model="Qwen/Qwen3-VL-32B-Instruct", max_model_len=262144), "set max_model_len to"),
        (base(devices=[0, 0]), "lists a device twice"),
        (base(tensor_parallel_size=4), "tensor_parallel_size is 4 but devices has 2"),
        (base(devices=[0, 1, 2]), "TP 3 does not divide"),
        (base(port=70000), "port must be an integer between 1 and 65535"),
        (base(source="github"), "source must be one of hf, modelscope"),
        (base(maxmodellen=5), "unknown keys ['maxmodellen']"),
        (
            base(host="0.0.0.0", api_key="k", env={"VLLM_SERVER_DEV_MODE": "1"}),
            "VLLM_SERVER_DEV_MODE",
        ),
        (base(host="0.0.0.0"), "(qwen3-vl).host is 0.0.0.0 but the service has no api_key"),
        (base(extra_args={"api-key": "x"}), "extra_args.api-key is set from the service's own"),
        (base(extra_args={"api_key": "x"}), "extra_args.api_key is set from the service's own"),
        (base(extra_args={"--API_KEY": "x"}), "set its api_key"),
        (base(extra_args={"served_model_name": "x"}), "set its name instead"),
        (base(env={"VLLM_API_KEY": "x"}), "env.VLLM_API_KEY is set by the toolkit"),
        (base(env={"ASCEND_RT_VISIBLE_DEVICES": "4"}), "use the service's devices instead"),
        (base(env={"X": {"a": 1}}), "env.X must be a string or number"),
        (base(memory={"weights_gib": "lots"}), "memory takes non-negative numbers"),
        (
            base(extra_args={"max-num-seq": 8}),
            "acceldeploy_services[0] (qwen3-vl).extra_args.max-num-seq: --max-num-seq is not an "
            "option of vllm 0.12.0's `vllm serve`; did you mean max-num-seqs?",
        ),
        (base(extra_args={"max_num_seqs": -1}), "extra_args.max_num_seqs must be >= 1, got -1"),
        (base(extra_args={"max-num-seqs": "lots"}), "must be an integer, got 'lots'"),
        (base(extra_args={"enforce-eager": "yes"}), "enforce-eager is a switch"),
        (base(extra_args={"dtype": "fp4"}), "extra_args.dtype must be one of auto, bfloat16"),
        (
            base(kv_cache_dtype="fp4"),
            "acceldeploy_services[0] (qwen3-vl).kv_cache_dtype is 'fp4', not a value of vllm "
            "0.12.0's --kv-cache-dtype (did you mean fp8?); use one of auto, bfloat16, fp8, "
            "fp8_e4m3, fp8_e5m2, fp8_inc",
        ),
        (base(kv_cache_dtype="fp8_ds_mla"), "accepted by the engine but the planner cannot size"),
        (base(model_config="/nonexistent/config.json"), "(qwen3-vl).model_config is /nonexistent"),
        (
            base(limit_mm_per_prompt={"imagez": 2}),
            "(qwen3-vl).limit_mm_per_prompt.imagez is not a modality vLLM knows (did you mean "
            "image?); use image, video, audio",
        ),
        (
            base(host="0.0.0.0", api_key="k", env={"VLLM_SERVER_DEV_MODE": "1"}),
            "(qwen3-vl).env.VLLM_SERVER_DEV_MODE exposes the dev-mode endpoints /server_info, "
            "/reset_prefix_cache, /reset_mm_cache, /sleep, /wake_up, /is_sleeping, "
            "/collective_rpc on host 0.0.0.0",
        ),
        (
            base(host="0.0.0.0", env={"VLLM_SERVER_DEV_MODE": "1"}),
            "(qwen3-vl).host is 0.0.0.0 with two problems: the service has no api_key",
        ),
        (
            {
                "acceldeploy_platform": "ascend",
                "acceldeploy_services": [
                    {"name": "a", "model": "Qwen/Qwen3-8B", "devices": [0]},
                    {"name": "b", "model": "Qwen/Qwen3-8B", "devices": [0], "port": 8001},
                ],
            },
            "both use device 0",
        ),
        (
            {
                "acceldeploy_platform": "ascend",
                "acceldeploy_services": [
                    {"name": "a", "model": "Qwen/Qwen3-8B", "devices": [0]},
                    {"name": "b", "model": "Qwen/Qwen3-8B", "devices": [1]},
                ],
            },
            "(b).port 8000 is also acceldeploy_services[0] (a).port",
        ),
        (
            {
                "acceldeploy_platform": "ascend",
                "acceldeploy_services": [{"name": "x", "model": "acme/unknown-7b", "devices": [0]}],
            },
            "not in the catalog",
        ),
    ],
)
def test_bad_services_are_refused_naming_the_variable(hostvars, message):
    with pytest.raises(AcceldeployError) as info:
        host_launches(hostvars)
    assert message in str(info.value)


def test_a_model_config_on_the_controller_sizes_a_model_outside_the_catalog(tmp_path):
    import json

    from acceldeploy.planner import catalog

    entry = catalog.find("Qwen/Qwen3-VL-8B-Instruct")
    assert entry is not None
    (tmp_path / "config.json").write_text(json.dumps(entry.config))
    service = {"name": "x", "model": "acme/unknown-8b", "devices": [0, 1], "max_model_len": 4096,
               "memory": {"weights_gib": 9.2}, "model_config": str(tmp_path)}  # fmt: skip
    hostvars = {"acceldeploy_platform": "ascend", "acceldeploy_services": [service]}
    (launch,) = host_launches(hostvars)
    assert launch.max_model_len == 4096
