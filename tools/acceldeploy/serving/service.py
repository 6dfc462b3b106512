"""A service from the inventory (acceldeploy_services[i]), checked and with defaults.

Precedence: the service's own keys, then the catalog's tuned profile for the platform,
then the defaults below. Every error names the inventory variable and what to set. The model
keys (model, source, revision, allow_patterns) are parsed by modelref.py, the one parser the
model_weights role uses too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceldeploy import secrets
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups, listeners
from acceldeploy.inventory.listeners import Listener
from acceldeploy.modelref import ModelRef, label, parse_model, parse_model_ref
from acceldeploy.planner import catalog
from acceldeploy.planner.engineopts import EngineOptions, option_name
from acceldeploy.planner.modelconfig import KV_CACHE_DTYPE_BYTES
from acceldeploy.platforms import for_name
from acceldeploy.serving import backends

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
LOOPBACK = ("127.0.0.1", "::1", "localhost")
WILDCARDS = ("0.0.0.0", "::")
IFNAME_RE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")  # a Linux interface name
# vLLM's modalities (limit_mm_per_prompt's keys: vllm/multimodal/inputs.py, ModalityData).
MODALITIES = ("image", "video", "audio")
# What VLLM_SERVER_DEV_MODE=1 adds to vLLM 0.12's API server (vllm/entrypoints/openai/
# api_server.py): outside /v1, so api_key does not guard them.
DEV_MODE_ENDPOINTS = ("/server_info", "/reset_prefix_cache", "/reset_mm_cache", "/sleep",
                      "/wake_up", "/is_sleeping", "/collective_rpc")  # fmt: skip
# vLLM options the toolkit sets from the service's own keys: never through extra_args, however
# spelt (--api_key, api-key, ...); the value is the key to use instead.
OWNED_OPTIONS = {
    "model": "model",
    "model-tag": "model",
    "host": "host",
    "port": "port",
    "served-model-name": "name",
    "tensor-parallel-size": "tensor_parallel_size",
    "tp": "tensor_parallel_size",
    "pipeline-parallel-size": "pipeline_parallel_size",
    "pp": "pipeline_parallel_size",
    "distributed-executor-backend": "backend (a service that spans hosts: ray or mp)",
    "data-parallel-size": "nodes (backend mp: one data-parallel rank per node)",
    "data-parallel-size-local": "nodes (backend mp: one data-parallel rank per node)",
    "data-parallel-address": "nodes (backend mp: the head's address, acceldeploy_node_ip)",
    "data-parallel-rpc-port": "cluster_port (backend mp: the head's data-parallel RPC port)",
    "data-parallel-start-rank": "nodes (backend mp: a node's rank is its place in nodes)",
    "headless": "nodes (backend mp: every node but the head runs headless)",
    "max-model-len": "max_model_len",
    "gpu-memory-utilization": "gpu_memory_utilization",
    "block-size": "block_size",
    "kv-cache-dtype": "kv_cache_dtype",
    "limit-mm-per-prompt": "limit_mm_per_prompt",
    "api-key": "api_key (kept in a 0600 file, never on the command line)",
}
# Environment variables that would override a service key behind the toolkit's back.
OWNED_ENV = {
    "VLLM_API_KEY": "api_key (kept in a 0600 file, never in the unit)",
    "ASCEND_RT_VISIBLE_DEVICES": "devices",
    "HABANA_VISIBLE_MODULES": "devices",
    "HABANA_VISIBLE_DEVICES": "devices",
    "CUDA_VISIBLE_DEVICES": "devices",
    "HF_HUB_OFFLINE": "nothing: the unit serves the local copy model_weights published",
    "RAY_ADDRESS": "nodes (the toolkit points vLLM at its group's Ray head)",
    "VLLM_HOST_IP": "acceldeploy_node_ip (the node's address on the group's network)",
}

DEFAULTS: dict[str, Any] = {
    "source": "hf",
    "revision": None,
    "allow_patterns": None,
    "devices": None,
    "tensor_parallel_size": None,
    "pipeline_parallel_size": 1,
    "nodes": None,
    "backend": None,
    "cluster_port": None,
    "network_interface": None,
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
    "allow_unauthenticated_public_bind": False,
}
MEMORY_KEYS = ("weights_gib", "activation_gib", "non_torch_gib")
# Every key of a service: (type, meaning). The parser accepts exactly these, and the inventory
# reference (docs/reference/inventory.md) is generated from them (docsgen/roledocs.py).
KEYS: dict[str, tuple[str, str]] = {
    "name": ("str, required", "The systemd unit and served model name: lowercase letters, "
             "digits, dots, dashes and underscores."),
    "model": ("str, required", "The model id, `org/name` (a catalog entry brings its tuned "
              "flags per platform)."),
    "source": ("hf or modelscope", "The hub model_weights downloads it from."),
    "revision": ("str", "The commit or tag to pin (the model's directory ends in @revision)."),
    "allow_patterns": ("list of str", "Only the files matching these globs are downloaded."),
    "devices": ("list of int", "The accelerator indexes the service owns (one per TP rank on "
                "one host); none on the CPU platform."),
    "tensor_parallel_size": ("int", "TP ranks; worked out from devices (and nodes) when unset."),
    "pipeline_parallel_size": ("int", "PP stages (a multi-node service's nodes)."),
    "nodes": ("list of str", "Inventory hostnames of a service over several hosts; the first "
              "is the head and serves the API."),
    "backend": ("ray, mp or nnodes", "How a service over nodes runs: ray (default; vLLM's Ray "
                "executor, TP x PP spread over the nodes), mp (data parallel across the nodes, "
                "one full replica per node, the others headless; upstream's multi-node recipe) "
                "or nnodes (one replica's TP x PP spread over the nodes by vLLM's own "
                "--nnodes, the others headless; only on stacks that can run it)."),
    "cluster_port": ("int", "The head's port the nodes dial: Ray's (ray, default 6379; Ray's "
                     "metrics on the next one), vLLM's data-parallel RPC (mp, default 13389) "
                     "or --master-port (nnodes, default 29501); not a service port."),
    "network_interface": ("str", "The NIC the collectives use on every node (GLOO / HCCL "
                          "interface variables)."),
    "port": ("int", "The API port."),
    "host": ("str", "The bind address; beyond loopback it needs api_key (or "
             "allow_unauthenticated_public_bind)."),
    "max_model_len": ("int or auto", "auto: the largest multiple of 1024 the KV cache holds."),
    "gpu_memory_utilization": ("float in (0, 1]", "The share of device memory vLLM may use."),
    "limit_mm_per_prompt": ("mapping", "Items per prompt by modality: `{image: 5, video: 0}`."),
    "extra_args": ("mapping", "Any `vllm serve` flag of the platform's engine, checked against "
                   "its recorded parser: `{max-num-seqs: 4}`; `true` is a bare flag."),
    "env": ("mapping", "Extra environment of the unit; no credentials (the unit is readable by "
            "every user)."),
    "model_config": ("path", "A local config.json (or model directory) for a model outside the "
                     "catalog, so the planner can size it."),
    "block_size": ("int", "KV cache block size; the platform's default when unset."),
    "kv_cache_dtype": ("str", "auto, or a dtype the engine and the planner know (fp8, ...)."),
    "memory": ("mapping", "weights_gib, activation_gib, non_torch_gib per device: override "
               "the planner's estimates."),
    "api_key": ("str (vault)", "The API key: only in the service's 0600 EnvironmentFile "
                "(VLLM_API_KEY)."),
    "allow_dev_mode_on_public_bind": ("bool", "Accept VLLM_SERVER_DEV_MODE beyond loopback."),
    "allow_unauthenticated_public_bind": ("bool", "Accept a bind beyond loopback without "
                                          "api_key."),
}  # fmt: skip


@dataclass(frozen=True)
class Service:
    name: str
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
    api_key: str | None = field(repr=False)
    allow_dev_mode_on_public_bind: bool
    ref: ModelRef
    where: str = ""  # how messages name it: acceldeploy_services[i] (name)
    catalog_entry: catalog.CatalogEntry | None = field(default=None, compare=False)
    pipeline_parallel_size: int = 1
    # A service that spans hosts: its nodes (inventory hostnames, the first is the head), how
    # it runs over them (backends.py), the head's port the nodes dial and the NIC the
    # collectives use (cluster.py).
    nodes: tuple[str, ...] = ()
    cluster_port: int = backends.DEFAULT.default_cluster_port
    network_interface: str | None = None
    backend: backends.Backend | None = None

    @property
    def engines(self) -> int:
        """The engines its API server spreads requests over: one per data-parallel rank."""
        return self.backend.engines(self.nodes) if self.backend else 1

    @property
    def headless_nodes(self) -> bool:
        """The head serves the API, every other node runs a headless part of the group."""
        return bool(self.backend and self.backend.headless)

    @property
    def model(self) -> str:
        return self.ref.model

    @property
    def source(self) -> str:
        return self.ref.source

    @property
    def revision(self) -> str | None:
        return self.ref.revision

    @property
    def allow_patterns(self) -> list[str] | None:
        patterns = self.ref.allow_patterns
        return None if patterns is None else list(patterns)

    @property
    def binds_loopback(self) -> bool:
        return self.host in LOOPBACK

    @property
    def ranks(self) -> int:
        """The ranks of one replica (TP x PP): over every node (ray), on each node (mp)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


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


def _keys(spec: dict[str, Any], var: str) -> None:
    allowed = list(KEYS)
    unknown = sorted(set(map(str, spec)) - set(allowed))
    if unknown:
        close = difflib.get_close_matches(unknown[0], allowed, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise AcceldeployError(
            f"{var} has unknown keys {unknown}{hint}; allowed: {', '.join(allowed)}"
        )


def _name(spec: dict[str, Any], var: str) -> str:
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise AcceldeployError(
            f"{var}.name must be a systemd-safe name (lowercase letters, digits, . _ -), "
            f"got {name!r}"
        )
    return name


def _merge(spec: dict[str, Any], tuned: dict[str, Any], var: str) -> dict[str, Any]:
    """Defaults < the catalog's tuned profile < the service's keys (mappings merged)."""
    merged: dict[str, Any] = {**DEFAULTS, **tuned, **spec}
    for key in ("extra_args", "env", "memory"):
        merged[key] = {
            **_mapping(tuned.get(key, {}), key),
            **_mapping(spec.get(key, {}), f"{var}.{key}"),
        }
    return merged


def _devices(merged: dict[str, Any], platform: str, var: str) -> list[int]:
    devices = merged["devices"]
    if devices is None:
        devices = [0] if for_name(platform).has_devices else []
    if not isinstance(devices, list):
        raise AcceldeployError(f"{var}.devices must be a list of device indexes, got {devices!r}")
    devices = [_int(d, f"{var}.devices[{i}]", 0, 63) for i, d in enumerate(devices)]
    if len(set(devices)) != len(devices):
        raise AcceldeployError(f"{var}.devices lists a device twice: {devices}")
    return devices


def _nodes(merged: dict[str, Any], var: str) -> tuple[str, ...]:
    nodes = merged["nodes"]
    if nodes is None:
        return ()
    if (
        not isinstance(nodes, list)
        or len(nodes) < 2
        or not all(isinstance(n, str) and n for n in nodes)
        or len(set(nodes)) != len(nodes)
    ):
        raise AcceldeployError(
            f"{var}.nodes must list two or more inventory hostnames, each once (the first is "
            f"the head), got {nodes!r}; drop it for a service on one host"
        )
    return tuple(nodes)


def _layout(
    merged: dict[str, Any], devices: list[int], nodes: tuple[str, ...], var: str
) -> tuple[int, int]:
    """(tensor_parallel_size, pipeline_parallel_size): TP x PP ranks, the same number on every
    node, one per listed device. `nodes`: the nodes one replica spans (none for mp, whose
    replica is one node's)."""
    pp = _int(merged["pipeline_parallel_size"], f"{var}.pipeline_parallel_size", 1, 64)
    count, per_node = len(nodes) or 1, max(len(devices), 1)
    tp = merged["tensor_parallel_size"]
    if tp is None:
        tp = per_node * count // pp
        if tp < 1 or tp * pp != per_node * count:
            raise AcceldeployError(
                f"{var}.pipeline_parallel_size {pp} does not divide the {per_node}"
                f" x {count} device(s) of the service; set tensor_parallel_size as well"
            )
    tp = _int(tp, f"{var}.tensor_parallel_size", 1, 64)
    if devices and not nodes and pp == 1 and tp != len(devices):
        raise AcceldeployError(
            f"{var}.tensor_parallel_size is {tp} but devices has {len(devices)} entries "
            f"{devices}; list {tp} devices or drop tensor_parallel_size"
        )
    if devices and tp * pp != len(devices) * count:
        where = f" on each of its {count} nodes" if nodes else ""
        raise AcceldeployError(
            f"{var}.tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} ranks, "
            f"but devices lists {len(devices)} device(s){where} ({len(devices) * count} in all); "
            f"make TP x PP equal the devices or list {tp * pp // count} device(s) per node"
        )
    if not devices and (tp * pp) % count:
        raise AcceldeployError(
            f"{var}.tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} ranks "
            f"cannot be spread evenly over its {count} nodes; make TP x PP a multiple of {count}"
        )
    return tp, pp


def _cluster(
    merged: dict[str, Any], backend: backends.Backend | None, var: str
) -> tuple[int, str | None]:
    given = merged["cluster_port"]
    default = (backend or backends.DEFAULT).default_cluster_port
    port = _int(default if given is None else given, f"{var}.cluster_port", 1, 65534)
    if backend:
        backend.check_ports(merged["port"], port, var)
    nic = merged["network_interface"]
    if nic is not None and (not isinstance(nic, str) or not IFNAME_RE.fullmatch(nic)):
        raise AcceldeployError(
            f"{var}.network_interface must be a network interface name (e.g. enp189s0f0), "
            f"got {nic!r}"
        )
    return port, nic


def _limits(merged: dict[str, Any], var: str) -> dict[str, int] | None:
    mm = merged["limit_mm_per_prompt"]
    if mm is None:
        return None
    limits = _mapping(mm, f"{var}.limit_mm_per_prompt")
    for key in map(str, limits):
        if key not in MODALITIES:
            close = difflib.get_close_matches(key, MODALITIES, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise AcceldeployError(
                f"{var}.limit_mm_per_prompt.{key} is not a modality vLLM knows{hint}; use "
                f"{', '.join(MODALITIES)}"
            )
    return {str(k): _int(v, f"{var}.limit_mm_per_prompt.{k}", 0) for k, v in limits.items()}


def _model_config(merged: dict[str, Any], var: str) -> str | None:
    """A config.json (or the model directory holding one) on the controller, read by the
    planner (render.model_arch) for a model outside the catalog."""
    path = merged["model_config"]
    if path in (None, ""):
        return None
    if not isinstance(path, str):
        raise AcceldeployError(
            f"{var}.model_config must be the path of a config.json on the controller, got {path!r}"
        )
    given = Path(path).expanduser()
    if not (given.is_file() or (given / "config.json").is_file()):
        raise AcceldeployError(
            f"{var}.model_config is {path}, but there is no such config.json on the controller; "
            "point it at the model's config.json (or the directory holding it), or drop "
            "model_config for a model of the catalog"
        )
    return path


def _memory(merged: dict[str, Any], var: str) -> dict[str, float]:
    memory = merged["memory"]
    bad = sorted(set(memory) - set(MEMORY_KEYS))
    numbers = [v for v in memory.values() if isinstance(v, int | float) and not isinstance(v, bool)]
    if bad or len(numbers) != len(memory) or any(v < 0 for v in numbers):
        raise AcceldeployError(
            f"{var}.memory takes non-negative numbers {', '.join(MEMORY_KEYS)}, got {memory}"
        )
    return {k: float(v) for k, v in memory.items()}


def _no_credential(name: str, value: Any, var: str) -> None:
    """The secrets rule (secrets.py) for one env variable or extra_args option."""
    instead = secrets.HUB_TOKENS.get(name) or secrets.HUB_TOKENS.get(name.upper())
    if instead:
        raise AcceldeployError(secrets.hub_token_message(var, instead))
    if secrets.is_credential_name(name):
        raise AcceldeployError(secrets.named_credential_message(var))
    if secrets.has_url_credentials(str(value)):
        raise AcceldeployError(secrets.url_credentials_message(var))


def _env(merged: dict[str, Any], var: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for key, value in merged["env"].items():
        if str(key).upper() in OWNED_ENV:
            raise AcceldeployError(
                f"{var}.env.{key} is set by the toolkit; use the service's "
                f"{OWNED_ENV[str(key).upper()]} instead"
            )
        _no_credential(str(key), value, f"{var}.env.{key}")
        if isinstance(value, dict | list) or value is None:
            raise AcceldeployError(f"{var}.env.{key} must be a string or number, got {value!r}")
        env[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def _extra_args(merged: dict[str, Any], var: str) -> dict[str, Any]:
    for key in merged["extra_args"]:
        owner = OWNED_OPTIONS.get(option_name(key).lower())
        if owner:
            raise AcceldeployError(
                f"{var}.extra_args.{key} is set from the service's own keys; set its "
                f"{owner} instead"
            )
        _no_credential(option_name(key).lower(), merged["extra_args"][key],
                       f"{var}.extra_args.{key}")  # fmt: skip
    return dict(merged["extra_args"])


def _exposure(merged: dict[str, Any], env: dict[str, str], var: str) -> str:
    """The bind address, refused beyond loopback without a guard on /v1 or with dev mode."""
    host = merged["host"]
    if not isinstance(host, str) or not host:
        raise AcceldeployError(f"{var}.host must be an address, got {host!r}")
    if host in LOOPBACK:
        return host
    open_v1 = not merged["api_key"] and merged["allow_unauthenticated_public_bind"] is not True
    dev = (
        env.get("VLLM_SERVER_DEV_MODE") not in (None, "0")
        and merged["allow_dev_mode_on_public_bind"] is not True
    )
    endpoints = ", ".join(DEV_MODE_ENDPOINTS)
    if open_v1 and dev:
        raise AcceldeployError(
            f"{var}.host is {host} with two problems: the service has no api_key (anyone who "
            f"reaches the port can use /v1) and env.VLLM_SERVER_DEV_MODE exposes the dev-mode "
            f"endpoints {endpoints}, which no api_key guards; bind 127.0.0.1, or set api_key "
            "(from the vault) and drop VLLM_SERVER_DEV_MODE (or set "
            "allow_unauthenticated_public_bind / allow_dev_mode_on_public_bind: true)"
        )
    if open_v1:
        raise AcceldeployError(
            f"{var}.host is {host} but the service has no api_key: anyone who reaches the port "
            "can use it; set api_key (from the vault), bind 127.0.0.1, or set "
            "allow_unauthenticated_public_bind: true"
        )
    if dev:
        raise AcceldeployError(
            f"{var}.env.VLLM_SERVER_DEV_MODE exposes the dev-mode endpoints {endpoints} on "
            f"host {host}, outside /v1 where api_key does not reach (anyone who reaches the "
            "port can drop the caches, put the engine to sleep or call methods on its workers); "
            "drop VLLM_SERVER_DEV_MODE, bind 127.0.0.1, or set allow_dev_mode_on_public_bind: true"
        )
    return host


def _api_key(value: Any, var: str) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or "\n" in value or not value.strip():
        raise AcceldeployError(f"{var}.api_key must be one line of text (from the vault)")
    return value


def parse_service(raw: Any, platform: str, index: int) -> Service:
    spec = _mapping(raw, label("acceldeploy_services", index))
    name = _name(spec, label("acceldeploy_services", index))
    var = label("acceldeploy_services", index, name)
    _keys(spec, var)
    entry = catalog.find(parse_model(spec.get("model"), var))
    merged = _merge(spec, entry.tuned(platform) if entry else {}, var)
    ref = parse_model_ref(merged, var)
    devices, nodes = _devices(merged, platform, var), _nodes(merged, var)
    backend = backends.choose(merged["backend"], nodes, var)
    tp, pp = _layout(merged, devices, backend.replica_nodes(nodes) if backend else (), var)
    cluster_port, nic = _cluster(merged, backend, var)
    max_len = merged["max_model_len"]
    if max_len != "auto":
        max_len = _int(max_len, f"{var}.max_model_len (or 'auto')", 1)
    util = merged["gpu_memory_utilization"]
    if isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1:
        raise AcceldeployError(f"{var}.gpu_memory_utilization must be in (0, 1], got {util!r}")
    env = _env(merged, var)
    block = merged["block_size"]
    return Service(
        name=name,
        devices=devices,
        tensor_parallel_size=tp,
        port=_int(merged["port"], f"{var}.port", 1, 65535),
        host=_exposure(merged, env, var),
        max_model_len=max_len,
        gpu_memory_utilization=float(util),
        limit_mm_per_prompt=_limits(merged, var),
        extra_args=_extra_args(merged, var),
        env=env,
        model_config=_model_config(merged, var),
        block_size=None if block is None else _int(block, f"{var}.block_size", 1, 1024),
        kv_cache_dtype=str(merged["kv_cache_dtype"]),
        memory=_memory(merged, var),
        api_key=_api_key(merged["api_key"], var),
        allow_dev_mode_on_public_bind=merged["allow_dev_mode_on_public_bind"] is True,
        ref=ref,
        where=var,
        catalog_entry=entry,
        pipeline_parallel_size=pp,
        nodes=nodes,
        cluster_port=cluster_port,
        network_interface=nic,
        backend=backend,
    )


def parse_services(raw: Any, platform: str) -> list[Service]:
    if not isinstance(raw, list):
        raise AcceldeployError(f"acceldeploy_services must be a list, got {type(raw).__name__}")
    services = [parse_service(s, platform, i) for i, s in enumerate(raw)]
    seen: dict[str, str] = {}
    for s in services:
        if f"name:{s.name}" in seen:
            raise AcceldeployError(
                f"services {seen[f'name:{s.name}']} and {s.name} use the same name {s.name}; "
                "give each its own"
            )
        seen[f"name:{s.name}"] = s.name
        for d in s.devices:
            key = f"device:{d}"
            if key in seen:
                raise AcceldeployError(
                    f"services {seen[key]} and {s.name} both use device {d}; give each "
                    "its own devices"
                )
            seen[key] = s.name
    listeners.check(service_listeners(services))
    return services


def host_services(host: str, hostvars: Mapping[str, Any]) -> list[Service]:
    """The services a host of the inventory runs, parsed (none on a host that does not serve:
    a gateway or monitor inherits the fleet's variables); a bad one refused naming the host."""
    platform = str(hostvars.get("acceldeploy_platform") or "")
    if not platform or not hostvars.get("acceldeploy_services") or not groups.serves(hostvars):
        return []
    try:
        return parse_services(hostvars["acceldeploy_services"], platform)
    except AcceldeployError as exc:
        raise AcceldeployError(f"{host}: {exc}") from None


def service_listeners(services: Iterable[Service], host: str | None = None) -> list[Listener]:
    """What a host's services listen on: each one's API (on a group's head), then its group's
    ports (backends.py). `host` None: as the head of every group (the services alone, before
    the host is known)."""
    found, group = [], []
    for s in services:
        head = not s.nodes or host in (None, s.nodes[0])
        if head:
            found.append(Listener(s.port, f"{s.where}.port", f"the API of service {s.name}"))
        if s.backend:
            group += s.backend.listeners(s.cluster_port, head, s.name, s.where)
    return found + group


def check_engine_values(service: Service, engine: EngineOptions) -> None:
    """The service's keys whose values the platform's engine decides, against the choices
    recorded from its own parser (data/engine-options/): kv_cache_dtype, which the planner
    must also be able to size (modelconfig.KV_CACHE_DTYPE_BYTES)."""
    option = engine.options.get("--kv-cache-dtype") or {}
    choices = [str(c) for c in option.get("choices") or []] or ["auto", *KV_CACHE_DTYPE_BYTES]
    allowed = [c for c in choices if c == "auto" or c in KV_CACHE_DTYPE_BYTES]
    given = service.kv_cache_dtype
    if given in allowed:
        return
    why = (
        "accepted by the engine but the planner cannot size its KV cache"
        if given in choices
        else f"not a value of {engine.engine} {engine.version}'s --kv-cache-dtype"
    )
    close = difflib.get_close_matches(given, allowed, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close and given not in choices else ""
    raise AcceldeployError(
        f"{service.where}.kv_cache_dtype is {given!r}, {why}{hint}; use one of {', '.join(allowed)}"
    )


def on_host(bind: str) -> str:
    """Where a listener bound to `bind` answers from the host itself."""
    return "127.0.0.1" if bind in (*WILDCARDS, "localhost") else bind


def reached_at(service: Service, address: str, peers: Iterable[str]) -> str | None:
    """Where peers (their addresses) reach a service on the host at `address`: its bind
    address, the host's for a wildcard bind, 127.0.0.1 for a loopback bind when every peer is
    that same machine (the same address), None when a loopback bind is out of their reach."""
    if service.host in LOOPBACK:
        return "127.0.0.1" if all(peer == address for peer in peers) else None
    return address if service.host in WILDCARDS else service.host


def reached_by(service: Service, host: str, address: str, peers: Iterable[str], who: str) -> str:
    """reached_at, else the refusal naming the service and the fix (who: "gateway", ...)."""
    reach = reached_at(service, address, peers)
    if reach is None:
        raise AcceldeployError(
            f"{service.name} on {host} binds {service.host}, which a {who} on another machine "
            f"cannot reach; set acceldeploy_services' host to the address the {who}s reach it "
            "on (non-loopback binds need an api_key)"
        )
    return reach
