"""A service from the inventory (acceldeploy_services[i]), checked and with defaults.

Precedence: the service's own keys, then the catalog's tuned profile for the platform,
then the defaults below. Every error names the inventory variable and what to set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from acceldeploy import catalog
from acceldeploy.errors import AcceldeployError

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
SOURCES = ("hf", "modelscope")
LOOPBACK = ("127.0.0.1", "::1", "localhost")

DEFAULTS: dict[str, Any] = {
    "source": "hf",
    "revision": None,
    "allow_patterns": None,
    "devices": None,
    "tensor_parallel_size": None,
    "port": 8000,
    "host": "127.0.0.1",
    "max_model_len": "auto",
    "gpu_memory_utilization": 0.9,
    "limit_mm_per_prompt": None,
    "extra_args": {},
    "env": {},
    "model_config": None,
    "block_size": None,
    "kv_cache_dtype": "auto",
    "memory": {},
    "api_key": None,
    "allow_dev_mode_on_public_bind": False,
}
MEMORY_KEYS = ("weights_gib", "activation_gib", "non_torch_gib")


@dataclass(frozen=True)
class Service:
    name: str
    model: str
    source: str
    revision: str | None
    allow_patterns: list[str] | None
    devices: list[int]
    tensor_parallel_size: int
    port: int
    host: str
    max_model_len: int | str
    gpu_memory_utilization: float
    limit_mm_per_prompt: dict[str, int] | None
    extra_args: dict[str, Any]
    env: dict[str, str]
    model_config: str | None
    block_size: int | None
    kv_cache_dtype: str
    memory: dict[str, float]
    api_key: str | None
    allow_dev_mode_on_public_bind: bool
    catalog_entry: catalog.CatalogEntry | None = field(default=None, compare=False)

    @property
    def binds_loopback(self) -> bool:
        return self.host in LOOPBACK


def _int(value: Any, var: str, low: int, high: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise AcceldeployError(f"{var} must be an integer {bound}, got {value!r}")
    return value


def _mapping(value: Any, var: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise AcceldeployError(f"{var} must be a mapping, got {value!r}")
    return value


def parse_service(raw: Any, platform: str, index: int) -> Service:
    var = f"acceldeploy_services[{index}]"
    spec = _mapping(raw, var)
    unknown = sorted(set(spec) - set(DEFAULTS) - {"name", "model"})
    if unknown:
        raise AcceldeployError(
            f"{var} has unknown keys {unknown}; allowed: name, model, {', '.join(DEFAULTS)}"
        )
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise AcceldeployError(
            f"{var}.name must be a systemd-safe name (lowercase letters, digits, . _ -), "
            f"got {name!r}"
        )
    var = f"acceldeploy_services[{index}] ({name})"
    model = spec.get("model")
    if not isinstance(model, str) or not MODEL_RE.match(model):
        raise AcceldeployError(f"{var}.model must look like 'org/name', got {model!r}")

    entry = catalog.find(model)
    tuned = entry.tuned(platform) if entry else {}
    merged: dict[str, Any] = {**DEFAULTS, **tuned, **spec}
    for key in ("extra_args", "env", "memory"):
        merged[key] = {
            **_mapping(tuned.get(key, {}), key),
            **_mapping(spec.get(key, {}), f"{var}.{key}"),
        }

    if merged["source"] not in SOURCES:
        raise AcceldeployError(
            f"{var}.source must be one of {', '.join(SOURCES)}, got {merged['source']!r}"
        )
    patterns = merged["allow_patterns"]
    if isinstance(patterns, str):
        patterns = [patterns]
    if patterns is not None and (
        not isinstance(patterns, list)
        or not patterns
        or not all(isinstance(p, str) and p for p in patterns)
    ):
        raise AcceldeployError(
            f"{var}.allow_patterns must be a non-empty list of glob patterns such as "
            f"['*.safetensors', '*.json'], got {merged['allow_patterns']!r}"
        )
    devices = merged["devices"]
    if devices is None:
        devices = [] if platform == "cpu" else [0]
    if not isinstance(devices, list):
        raise AcceldeployError(f"{var}.devices must be a list of device indexes, got {devices!r}")
    devices = [_int(d, f"{var}.devices[{i}]", 0, 63) for i, d in enumerate(devices)]
    if len(set(devices)) != len(devices):
        raise AcceldeployError(f"{var}.devices lists a device twice: {devices}")
    tp = merged["tensor_parallel_size"]
    tp = _int(tp, f"{var}.tensor_parallel_size", 1, 64) if tp is not None else max(len(devices), 1)
    if devices and tp != len(devices):
        raise AcceldeployError(
            f"{var}.tensor_parallel_size is {tp} but devices has {len(devices)} entries "
            f"{devices}; list {tp} devices or drop tensor_parallel_size"
        )
    max_len = merged["max_model_len"]
    if max_len != "auto":
        max_len = _int(max_len, f"{var}.max_model_len (or 'auto')", 1)
    util = merged["gpu_memory_utilization"]
    if isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1:
        raise AcceldeployError(f"{var}.gpu_memory_utilization must be in (0, 1], got {util!r}")
    mm = merged["limit_mm_per_prompt"]
    if mm is not None:
        mm = {
            str(k): _int(v, f"{var}.limit_mm_per_prompt.{k}", 0)
            for k, v in _mapping(mm, f"{var}.limit_mm_per_prompt").items()
        }
    memory = {k: float(v) for k, v in merged["memory"].items()}
    bad_memory = sorted(set(memory) - set(MEMORY_KEYS))
    if bad_memory or any(v < 0 for v in memory.values()):
        raise AcceldeployError(
            f"{var}.memory takes non-negative {', '.join(MEMORY_KEYS)}, got {merged['memory']}"
        )
    host = merged["host"]
    if not isinstance(host, str) or not host:
        raise AcceldeployError(f"{var}.host must be an address, got {host!r}")
    env = {str(k): str(v) for k, v in merged["env"].items()}
    if (
        env.get("VLLM_SERVER_DEV_MODE") not in (None, "0")
        and host not in LOOPBACK
        and merged["allow_dev_mode_on_public_bind"] is not True
    ):
        raise AcceldeployError(
            f"{var}: VLLM_SERVER_DEV_MODE exposes unauthenticated admin endpoints and host is "
            f"{host}; bind 127.0.0.1, drop VLLM_SERVER_DEV_MODE, or set "
            "allow_dev_mode_on_public_bind: true"
        )
    block = merged["block_size"]
    return Service(
        name=name,
        model=model,
        source=merged["source"],
        revision=None if merged["revision"] is None else str(merged["revision"]),
        allow_patterns=patterns,
        devices=devices,
        tensor_parallel_size=tp,
        port=_int(merged["port"], f"{var}.port", 1, 65535),
        host=host,
        max_model_len=max_len,
        gpu_memory_utilization=float(util),
        limit_mm_per_prompt=mm,
        extra_args=merged["extra_args"],
        env=env,
        model_config=merged["model_config"],
        block_size=None if block is None else _int(block, f"{var}.block_size", 1, 1024),
        kv_cache_dtype=str(merged["kv_cache_dtype"]),
        memory=memory,
        api_key=merged["api_key"],
        allow_dev_mode_on_public_bind=merged["allow_dev_mode_on_public_bind"] is True,
        catalog_entry=entry,
    )


def parse_services(raw: Any, platform: str) -> list[Service]:
    if not isinstance(raw, list):
        raise AcceldeployError(f"acceldeploy_services must be a list, got {type(raw).__name__}")
    services = [parse_service(s, platform, i) for i, s in enumerate(raw)]
    seen: dict[str, str] = {}
    for s in services:
        for key, what in ((f"name:{s.name}", "name"), (f"port:{s.port}", "port")):
            if key in seen:
                raise AcceldeployError(
                    f"services {seen[key]} and {s.name} use the same {what} "
                    f"{key.split(':', 1)[1]}; give each its own"
                )
            seen[key] = s.name
        for d in s.devices:
            key = f"device:{d}"
            if key in seen:
                raise AcceldeployError(
                    f"services {seen[key]} and {s.name} both use device {d}; give each "
                    "its own devices"
                )
            seen[key] = s.name
    return services
