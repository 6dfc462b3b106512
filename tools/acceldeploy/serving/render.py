"""Turn (service, platform, model geometry, planner) into the final vLLM argv and env.

The platform's launcher (launchers.py: Gaudi's bucketing) tunes the typed engine options before
any argv string exists, so this argv is the one the unit runs. hostplan.py calls it for every
service of a host; the unit and launcher templates only print what comes out.
"""

from __future__ import annotations

import json
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.modelref import model_dir
from acceldeploy.planner import engineopts
from acceldeploy.planner.kvplan import GIB, KVLayout, MemoryBudget, kv_layout, largest_fitting_len
from acceldeploy.planner.modelconfig import ModelArch, load_model_arch
from acceldeploy.planner.platforms import HostPlatform
from acceldeploy.serving import cluster
from acceldeploy.serving.launchers import launcher_for
from acceldeploy.serving.layout import cache_dir
from acceldeploy.serving.service import Service
from acceldeploy.serving.values import HostContext, Launch

AUTO_LEN_STEP = 1024
DEFAULT_CEILING = 32768
SECRET_ENV = "VLLM_API_KEY"


def model_path(models_root: str, service: Service) -> str:
    return model_dir(models_root, service.model, service.revision)


def model_arch(service: Service) -> ModelArch:
    if service.model_config:
        return load_model_arch(service.model_config)
    if service.catalog_entry:
        return service.catalog_entry.arch()
    raise AcceldeployError(
        f"{service.where}: model {service.model} is not in the catalog; set "
        "model_config: <path to its config.json> so the planner can size it"
    )


def available_kv_bytes(service: Service, platform: HostPlatform, env: dict[str, str]) -> int:
    """KV cache memory per rank that vLLM will find, from the platform's budget rules."""
    if platform.device_memory_bytes is None:
        # Unset, vLLM picks the budget itself, and the versions differ (vllm/platforms/cpu.py
        # get_device_total_memory: 0.12.0 takes 4 GiB, 0.13.0 half the RAM per NUMA node), so
        # the planner asks for it explicitly; set, both use exactly that many GiB.
        space = env.get("VLLM_CPU_KVCACHE_SPACE", "0")
        if not space.isdigit() or int(space) < 1:
            raise AcceldeployError(
                f"{service.where}: env VLLM_CPU_KVCACHE_SPACE must be a whole number of "
                f"GiB >= 1 on platform {platform.name}, got {space!r}"
            )
        return int(space) * GIB
    weights = service.memory.get("weights_gib")
    if weights is None:
        if service.catalog_entry is None:
            raise AcceldeployError(
                f"{service.where}: set memory.weights_gib (weights per device) for "
                f"{service.model}, which is not in the catalog"
            )
        weights = service.catalog_entry.weights_gib(service.ranks)
    budget = MemoryBudget(
        total_bytes=platform.device_memory_bytes,
        gpu_memory_utilization=service.gpu_memory_utilization,
        weights_bytes=int(weights * GIB),
        activation_bytes=int(service.memory.get("activation_gib", platform.activation_gib) * GIB),
        non_torch_bytes=int(service.memory.get("non_torch_gib", platform.non_torch_gib) * GIB),
    )
    return budget.available_kv_bytes


def resolve_max_model_len(
    service: Service, arch: ModelArch, layout: KVLayout, available: int
) -> int:
    ceiling = arch.max_position_embeddings or DEFAULT_CEILING
    if service.max_model_len == "auto":
        length = largest_fitting_len(layout, available, ceiling, AUTO_LEN_STEP)
        if length < layout.block_size:
            raise AcceldeployError(
                f"{service.where}: no KV cache room for even one block "
                f"({available / GIB:.2f} GiB available per device); use more devices, raise "
                "gpu_memory_utilization, or a smaller model"
            )
        return length
    assert isinstance(service.max_model_len, int)
    if (
        arch.max_position_embeddings
        and service.max_model_len > arch.max_position_embeddings
        and service.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1"
    ):
        # vLLM refuses it at start-up (ModelConfig: "greater than the derived max_model_len").
        raise AcceldeployError(
            f"{service.where}: max_model_len {service.max_model_len} exceeds the model's "
            f"max_position_embeddings {arch.max_position_embeddings}; set max_model_len to "
            f"{arch.max_position_embeddings} or less (or auto)"
        )
    needed = layout.needed_bytes(service.max_model_len)
    if not layout.fits(available, service.max_model_len):
        estimate = layout.estimate_max_model_len(available, service.max_model_len)
        raise AcceldeployError(
            f"{service.where}: max_model_len {service.max_model_len} needs "
            f"{needed / GIB:.2f} GiB KV cache per device but {available / GIB:.2f} GiB is "
            f"available; set max_model_len to {estimate} or less (or auto), raise "
            "gpu_memory_utilization, or add devices"
        )
    return service.max_model_len


def cli_args(options: dict[str, Any]) -> list[str]:
    """vLLM flags from a mapping: True is a bare flag, None/False drop it, lists repeat."""
    args: list[str] = []
    for key, value in options.items():
        flag = "--" + str(key).lstrip("-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            for item in value:
                args += [flag, str(item)]
        elif isinstance(value, dict):
            args += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            args += [flag, str(value)]
    return args


# Flags only the head's API server takes: vLLM refuses them on a headless rank
# (vllm/entrypoints/cli/serve.py run_headless: "api_server_count can't be set in headless mode").
HEAD_ONLY = ("api-server-count",)


def group_options(service: Service, place: cluster.Place | None) -> dict[str, Any]:
    """A multi-node service's flags on this node (its backend's)."""
    if place is None or service.backend is None:
        return {}
    return dict(service.backend.flags(service.nodes, service.cluster_port, place))


def engine_options(
    service: Service, platform: HostPlatform, length: int, place: cluster.Place | None = None
) -> dict[str, Any]:
    """The vLLM flags the toolkit owns, the platform's defaults, then the service's extras."""
    options: dict[str, Any] = {
        "served-model-name": service.name,
        "host": service.host,
        "port": service.port,
        "tensor-parallel-size": service.tensor_parallel_size,
        "max-model-len": length,
    }
    if service.pipeline_parallel_size > 1:
        options["pipeline-parallel-size"] = service.pipeline_parallel_size
    options.update(group_options(service, place))
    if platform.device_memory_bytes is not None:
        options["gpu-memory-utilization"] = service.gpu_memory_utilization
    if service.block_size is not None:
        options["block-size"] = service.block_size
    if service.kv_cache_dtype != "auto":
        options["kv-cache-dtype"] = service.kv_cache_dtype
    if service.limit_mm_per_prompt is not None:
        options["limit-mm-per-prompt"] = service.limit_mm_per_prompt
    options.update(platform.default_args)
    engine = engineopts.platform_engine(platform)
    engine.check(service.extra_args, f"{service.where}.extra_args")
    options.update(service.extra_args)
    if place is not None and service.headless_nodes and not place.is_head:
        for flag in HEAD_ONLY:
            options.pop(flag, None)
    return options


def service_env(service: Service, platform: HostPlatform, context: HostContext) -> dict[str, str]:
    """The platform's variables, the devices, the node's network variables (a multi-node
    service) and the service's own: what vLLM (and, on every node, Ray) starts with."""
    env = dict(platform.env)
    if platform.device_env and service.devices:
        env[platform.device_env] = ",".join(str(d) for d in service.devices)
    if service.nodes:
        env.update(cluster.node_env(platform, node_place(service, context)))
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a worker killed by a signal names it (serving.crash)
    env.update(service.env)
    return env


def node_place(service: Service, context: HostContext) -> cluster.Place:
    return cluster.place(service, context.host, context.node_ips)


def render_service(service: Service, platform: HostPlatform, context: HostContext) -> Launch:
    env = service_env(service, platform, context)
    place = node_place(service, context) if service.nodes else None
    ray = place is not None and not service.headless_nodes
    if ray and place:
        env["RAY_ADDRESS"] = place.head_address

    arch = model_arch(service)
    block = service.block_size or platform.block_size
    layout = kv_layout(
        arch,
        service.tensor_parallel_size,
        block,
        service.kv_cache_dtype,
        pp=service.pipeline_parallel_size,
        rules=platform.kv_rules,
    )
    available = available_kv_bytes(service, platform, env)
    length = resolve_max_model_len(service, arch, layout, available)
    options = engine_options(service, platform, length, place)
    launcher = launcher_for(platform)
    defaults, tuned = launcher.tuning(
        service, length, block, options, context.gaudi_shapes.get(service.name),
        cache_dir(service.name),
    )  # fmt: skip
    env = {**defaults, **env}
    options.update(tuned)

    path = model_path(context.models_root, service)
    kv = {
        "bytes_per_token": layout.bytes_per_token,
        "block_size": block,
        "available_gib": round(available / GIB, 2),
        "kv_cache_tokens": layout.kv_cache_tokens(available, length),
        "needed_gib": round(layout.needed_bytes(length) / GIB, 2),
        "max_concurrency": round(layout.max_concurrency(available, length), 2),
    }
    return Launch(
        name=service.name,
        model_path=path,
        argv=[*launcher.serve_command(context.env_prefix), path, *cli_args(options)],
        env=dict(sorted(env.items())),
        secret_env=[SECRET_ENV] if service.api_key else [],
        platform=platform.name,
        runtime=platform.runtime,
        devices=service.devices,
        device_paths=platform.device_paths(service.devices),
        env_scripts=list(launcher.host_env_scripts()),
        port=service.port,
        host=service.host,
        max_model_len=length,
        kv=kv,
        nodes={n: place.ips[n] for n in service.nodes} if place else {},
        ray_unit=cluster.node_unit_name(service) if ray else None,
        cluster_address=place.head_address if place else None,
    )
