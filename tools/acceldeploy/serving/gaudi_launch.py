"""Gaudi specifics of a service's launch: bucketing env, recipe cache, NUMA, the container.

The bucketing is what HabanaAI/vllm-fork's launcher derives from a service's input and output
ranges (seed 004, section 2.1: `start_gaudi_vllm_server.sh -i MIN,MAX -o MIN,MAX -b SEQS -t
TOKENS -c CACHE`). The formulas are those of `set_linear_bucketing` in
HabanaAI/vllm-fork scripts/utils.sh (commit 0741b7d27651f4729a374bbf5710cf6b0a2f97e3),
which scripts/start_gaudi_vllm_server.sh (commit 0afea128c384e05b00794b618ed71226e5fcd0b5)
sources; with block size B, SEQS = max_num_seqs, TOKENS = max_num_batched_tokens:

    prompt bs:    min 1, step 1, max = max(1, min(TOKENS // ceil(in_min, B), SEQS))
    prompt seq:   min ceil(in_min, B), step B, max ceil(in_max, B)
    decode bs:    step = min(ceil_div(SEQS, 16), 16), min 1, max ceil(SEQS, step)
    decode block: step B, min ceil_div(ceil_div(in_min, B), B),
                  max ceil((ceil_div(in_max + out_max, B) + 1) * decode_bs_max, B)

with `ceil(n, b)` rounding n up to a multiple of b. Like the script (`${VAR:-default}`), a
value the service sets in its own env wins. Also from the script: VLLM_ZERO_PADDING=false
when in_min == in_max, VLLM_PROMPT_USE_FUSEDSDPA=true, VLLM_EXPONENTIAL_BUCKETING=false,
PT_HPU_ENABLE_LAZY_COLLECTIVES=true with more than one HPU, and the warm-up recipe cache
`PT_HPU_RECIPE_CACHE_CONFIG=<dir>,false,16384` (utils.sh `set_perf_tuning`).

The names the values are set under are the host's stack's (versions/stacks.yml `bucketing`,
planner.stacks.DEFAULT_BUCKETING): the fork reads `VLLM_PROMPT_SEQ_BUCKET_*`, the vllm-gaudi
plugin `VLLM_PROMPT_QUERY_BUCKET_*` (the SEQ names are only its deprecated fallback) and not
`VLLM_ZERO_PADDING`; an empty name is not set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.engineopts import option_name
from acceldeploy.planner.stacks import DEFAULT_BUCKETING

DEFAULT_MAX_NUM_SEQS = 128  # utils.sh PREFERED_NUM_SEQS
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # utils.sh PREFERED_BATCHED_TOKENS
DEFAULT_OUTPUT_MAX = 2048  # start_gaudi_vllm_server.sh -o default 4,2048
RANGE_MIN = 4  # the script's default lower bound of -i and -o
RECIPE_CACHE_MAX_MB = 16384  # utils.sh set_perf_tuning


def ceil(num: int, base: int) -> int:
    """utils.sh ceil: num rounded up to a multiple of base."""
    return (num + base - 1) // base * base


def ceil_div(num: int, div: int) -> int:
    """utils.sh ceil_div."""
    return (num + div - 1) // div


@dataclass(frozen=True)
class Shape:
    """The traffic a Gaudi service is warmed up for (the script's -i, -o, -b, -t)."""

    input_min: int
    input_max: int
    output_min: int
    output_max: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int = 128


def _pair(value: Any, var: str) -> tuple[int, int]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not 1 <= value[0] <= value[1]
    ):
        raise AcceldeployError(f"{var} must be [min, max] with 1 <= min <= max, got {value!r}")
    return int(value[0]), int(value[1])


def _positive(value: Any, var: str) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1:
        raise AcceldeployError(f"{var} must be a positive integer, got {value!r}")
    return number


def shape_for(
    name: str,
    max_model_len: int,
    options: Mapping[str, Any],
    spec: Mapping[str, Any] | None,
    block_size: int,
) -> Shape:
    """The service's shape: `spec` ({input: [min, max], output: [min, max]}, from
    vllm_service_gaudi_shapes[name]) or, without it, output up to min(2048, len // 2) and the
    rest of max_model_len for the input. max_num_seqs / max_num_batched_tokens come from the
    service's engine options (its extra_args) or the script's preferred 128 / 8192."""
    spec = dict(spec or {})
    var = f"vllm_service_gaudi_shapes.{name}"
    unknown = sorted(set(spec) - {"input", "output"})
    if unknown:
        raise AcceldeployError(f"{var} has unknown keys {unknown}; allowed: input, output")
    if "output" in spec:
        out_min, out_max = _pair(spec["output"], f"{var}.output")
    else:
        out_min, out_max = RANGE_MIN, min(DEFAULT_OUTPUT_MAX, max_model_len // 2)
    if "input" in spec:
        in_min, in_max = _pair(spec["input"], f"{var}.input")
    else:
        in_min, in_max = RANGE_MIN, max_model_len - out_max
    if in_max + out_max > max_model_len:
        raise AcceldeployError(
            f"service {name}: input max {in_max} + output max {out_max} exceeds max_model_len "
            f"{max_model_len} (seed 004: -l must cover input + output); lower {var}.input / "
            ".output or raise max_model_len"
        )
    seqs = option(options, "max-num-seqs")
    tokens = option(options, "max-num-batched-tokens")
    var = f"service {name} extra_args"
    return Shape(
        input_min=in_min,
        input_max=in_max,
        output_min=out_min,
        output_max=out_max,
        max_num_seqs=DEFAULT_MAX_NUM_SEQS
        if seqs is None
        else _positive(seqs, f"{var}.max-num-seqs"),
        max_num_batched_tokens=DEFAULT_MAX_NUM_BATCHED_TOKENS
        if tokens is None
        else _positive(tokens, f"{var}.max-num-batched-tokens"),
        block_size=block_size,
    )


def option(options: Mapping[str, Any], flag: str) -> Any:
    """An engine option by its flag name, however the inventory spelt it (-/_ and leading --)."""
    for key, value in options.items():
        if option_name(key) == flag:
            return value
    return None


def linear_bucketing(shape: Shape, names: Mapping[str, str] = DEFAULT_BUCKETING) -> dict[str, str]:
    """utils.sh set_linear_bucketing, line for line (see the module docstring), under the
    stack's names (``names``: planner.stacks.bucketing)."""
    b = shape.block_size
    prompt_bs_max = shape.max_num_batched_tokens // ceil(shape.input_min, b)
    prompt_bs_max = max(min(ceil(prompt_bs_max, 1), shape.max_num_seqs), 1)
    decode_bs_step = min(ceil_div(shape.max_num_seqs, 16), 16)
    decode_bs_max = ceil(shape.max_num_seqs, decode_bs_step)
    decode_block_min = ceil_div(ceil_div(shape.input_min, b), b)
    max_context_blocks = ceil_div(shape.input_max + shape.output_max, b) + 1
    decode_block_max = ceil(max_context_blocks * decode_bs_max, b)
    ranges = {
        "prompt_bs": (1, 1, prompt_bs_max),
        "prompt_len": (ceil(shape.input_min, b), b, ceil(shape.input_max, b)),
        "decode_bs": (1, decode_bs_step, decode_bs_max),
        "decode_block": (decode_block_min, b, decode_block_max),
    }
    selector, _, chosen = names["linear"].partition("=")
    values = {selector: chosen} if selector else {}
    for role, (low, step, high) in ranges.items():
        prefix = names[role]
        values.update({f"{prefix}_MIN": str(low), f"{prefix}_STEP": str(step),
                       f"{prefix}_MAX": str(high)})  # fmt: skip
    return values


def service_env(
    shape: Shape,
    devices: Sequence[int],
    recipe_cache: str,
    names: Mapping[str, str] = DEFAULT_BUCKETING,
) -> dict[str, str]:
    """Bucketing, padding, FusedSDPA, lazy collectives and the recipe cache for one service,
    under the stack's names."""
    env = linear_bucketing(shape, names)
    if names["zero_padding"]:
        env[names["zero_padding"]] = "false" if shape.input_min == shape.input_max else "true"
    env["VLLM_PROMPT_USE_FUSEDSDPA"] = "true"
    if len(devices) > 1:
        env["PT_HPU_ENABLE_LAZY_COLLECTIVES"] = "true"
    env["PT_HPU_RECIPE_CACHE_CONFIG"] = f"{recipe_cache},false,{RECIPE_CACHE_MAX_MB}"
    return env


def engine_options(options: Mapping[str, Any], shape: Shape) -> dict[str, int]:
    """--max-num-seqs / --max-num-batched-tokens the bucketing assumed, where not set."""
    extra: dict[str, int] = {}
    if option(options, "max-num-seqs") is None:
        extra["max-num-seqs"] = shape.max_num_seqs
    if option(options, "max-num-batched-tokens") is None:
        extra["max-num-batched-tokens"] = shape.max_num_batched_tokens
    return extra


def docker_argv(
    name: str,
    image: str,
    env_names: Sequence[str],
    mounts: Sequence[tuple[str, str, bool]],
    inner_argv: Sequence[str],
    run_args: Sequence[str],
    cpuset: tuple[str, int] | None = None,
) -> list[str]:
    """`docker run` in the foreground (systemd supervises the CLI; --rm on exit). Values are
    passed as `-e NAME` so they come from the unit's environment, never the command line."""
    if not image:
        raise AcceldeployError(
            f"service {name}: no Gaudi image; set vllm_service_gaudi_image (or run the "
            "gaudi_runtime role, which records it)"
        )
    argv = ["/usr/bin/docker", "run", "--rm", "--init", f"--name=acceldeploy-{name}"]
    argv += list(run_args)
    if cpuset is not None:
        argv += [f"--cpuset-cpus={cpuset[0]}", f"--cpuset-mems={cpuset[1]}"]
    for var in env_names:
        argv += ["-e", var]
    for source, target, writable in mounts:
        argv += ["-v", f"{source}:{target}:{'rw' if writable else 'ro'}"]
    return [*argv, image, *inner_argv]
