"""The roles' day-2 numbers (timeouts, retries, counts, keeps, batches) and their bounds, and
the durations a role hands straight to a program (HAProxy's, Prometheus's: durations.py).

A role's argument spec says only `int` or `float` (Ansible's specs have no minimum or maximum),
and a number out of range acts late or wrongly: a negative python_env_keep pruned every older
build, an async poll of 0 fires a download and forgets it. So each number's bounds are here,
and each role checks its own beside its other inputs in preflight, before any host is contacted
(roles/<role>/tasks/validate.yml or plan.yml, through the acceldeploy_bounds action; preflight's
one pass asks ``role_errors`` for every role it checks).
host_tuning's numbers are bounded with its other inputs (hosttuning/inputs.py);
vllm_service_serial, a count or a share of the hosts, by check_serial (the rollout's batches,
serving/cluster.py, read it the same way).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import durations

DAY = 86400


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    unit: str  # what the number counts, for the message
    whole: bool = True
    note: str = ""  # what a special value means

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        note = f"; {self.note}" if self.note else ""
        return f"{kind} from {_shown(self.low)} to {_shown(self.high)} ({self.unit}{note})"


# The words a true/false variable may arrive as (-e NAME=true is a string): what Ansible's
# `bool` filter reads without a deprecation warning (its own list), so a switch that passes
# here reads the same in a role's `when: <variable> | bool`.
TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})


def flag(value: Any, name: str) -> bool:
    """A true/false variable as Ansible passes it: a boolean, 0 or 1, or one of the words."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    word = value.lower() if isinstance(value, str) else None
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise AcceldeployError(f"{name}: {value!r} is not a boolean; use true or false")


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


BOUNDS: dict[str, Bound] = {
    "python_env_keep": Bound(0, 100, "older builds kept", note="0 keeps only the current one"),
    "python_env_fanout_port": Bound(1, 65535, "a TCP port"),
    "python_env_fanout_idle_timeout": Bound(1, 7 * DAY, "seconds"),
    "python_env_fanout_timeout": Bound(60, 7 * DAY, "seconds"),
    "model_weights_seed_port": Bound(1, 65535, "a TCP port"),
    "model_weights_seed_idle_timeout": Bound(1, 7 * DAY, "seconds"),
    "model_weights_free_space_reserve_gib": Bound(0, 1 << 20, "GiB", whole=False),
    "model_weights_max_workers": Bound(1, 64, "parallel downloads"),
    "model_weights_async_timeout": Bound(60, 30 * DAY, "seconds"),
    "model_weights_async_poll": Bound(1, 3600, "seconds", note="0 would not wait for the download"),
    "model_weights_progress_interval": Bound(0.1, 3600, "seconds", whole=False),
    "vllm_service_start_timeout": Bound(0, DAY, "seconds", note="0 is the platform's"),
    "vllm_service_restart_sec": Bound(0, 3600, "seconds"),
    "vllm_service_start_limit_burst": Bound(1, 100, "failed starts"),
    "vllm_service_drain_timeout": Bound(0, DAY, "seconds", note="0 does not wait"),
    "vllm_service_model_keep": Bound(-1, 100, "older revisions kept", note="-1 never prunes"),
    "vllm_service_max_fail_percentage": Bound(0, 100, "percent of a batch"),
    "gateway_retries": Bound(0, 10, "retries", note="each on another server"),
    "gateway_stats_port": Bound(0, 65535, "a TCP port", note="0 has no stats page"),
    "gateway_affinity_balance_factor": Bound(100, 1000, "percent of the average load"),
    "gateway_affinity_buffer": Bound(16384, 16 << 20, "bytes"),
    "vllm_service_gate_max_tokens": Bound(1, 4096, "tokens"),
    "vllm_service_gate_completion_timeout": Bound(1, DAY, "seconds"),
    "vllm_service_gate_retries": Bound(1, DAY // 5, "polls 5 s apart"),
    "gaudi_runtime_hccl_timeout": Bound(60, DAY, "seconds"),
    "monitor_prometheus_port": Bound(1, 65535, "a TCP port"),
    "monitor_node_exporter_port": Bound(1, 65535, "a TCP port"),
    "monitor_npu_exporter_port": Bound(1, 65535, "a TCP port"),
    "monitor_gaudi_exporter_port": Bound(1, 65535, "a TCP port"),
    "monitor_memory_interval": Bound(1, 3600, "seconds"),
    "monitor_npu_exporter_update_time": Bound(1, 60, "seconds, npu-exporter's -updateTime"),
    "monitor_kv_cache_high": Bound(0.01, 1, "a share of the KV cache", whole=False),
    "monitor_prefix_cache_drop": Bound(
        0.01, 0.99, "a share of the day before's hit rate", whole=False
    ),
}
WHOLE = re.compile(r"\s*-?\d+\s*")


def check_serial(serial: Any) -> tuple[int, float]:
    """vllm_service_serial as Ansible reads serial: (count, 0) for a count >= 1, (0, share)
    for "N%" with 1 <= N <= 100. Preflight runs it (roles/vllm_service/tasks/plan.yml), before
    any host is contacted; the rollout again (cluster.rollout)."""
    text = "" if isinstance(serial, bool | list | dict) else str(serial).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if 1 <= share <= 100:
                return 0, share
        elif int(text) >= 1:
            return int(text), 0.0
    except ValueError:
        pass
    raise AcceldeployError(
        f"vllm_service_serial must be a number >= 1 or a percentage from 1% to 100% such as "
        f"25% (hosts restarted per batch), got {serial!r}"
    )


# The keys roles/gateway/templates/haproxy.cfg.j2 reads of gateway_timeouts and gateway_check.
GATEWAY_TIMEOUTS = ("connect", "client", "server", "http_request", "queue", "check")
GATEWAY_CHECK = ("inter", "fall", "rise")


def _fields(value: Any, name: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """A mapping the template reads key by key: each of its keys there, no other (a mapping
    given replaces the role's default whole)."""
    if not isinstance(value, Mapping):
        raise AcceldeployError(f"{name} must be a mapping of {', '.join(keys)}, got {value!r}")
    unknown = sorted(str(key) for key in value if key not in keys)
    if unknown:
        raise AcceldeployError(f"{name}.{unknown[0]}: no such key; known: {', '.join(keys)}")
    missing = [key for key in keys if key not in value]
    if missing:
        raise AcceldeployError(
            f"{name} has no {missing[0]}: the inventory's {name} replaces the role's default "
            f"as a whole; give each of {', '.join(keys)}"
        )
    return value


def _haproxy_time(value: Any, name: str, positive: bool = False) -> None:
    ms = durations.haproxy_ms(value)
    if ms is None or (positive and ms <= 0):
        above = " above 0" if positive else ""
        raise AcceldeployError(
            f"{name} must be a HAProxy duration{above}: {durations.HAPROXY_SYNTAX}, got {value!r}"
        )


def check_gateway_timeouts(value: Any) -> None:
    """gateway_timeouts: each of HAProxy's timeouts the config sets, a duration it reads."""
    timeouts = _fields(value, "gateway_timeouts", GATEWAY_TIMEOUTS)
    for key in GATEWAY_TIMEOUTS:
        _haproxy_time(timeouts[key], f"gateway_timeouts.{key}")


def check_gateway_check(value: Any) -> None:
    """gateway_check: the health checks' interval (above 0: HAProxy refuses 0), the misses
    before a server is out and the answers before it is back (at least 1)."""
    check = _fields(value, "gateway_check", GATEWAY_CHECK)
    _haproxy_time(check["inter"], "gateway_check.inter", positive=True)
    for key in ("fall", "rise"):
        count = check[key]
        text = "" if isinstance(count, bool) else str(count)
        if not WHOLE.fullmatch(text) or int(text) < 1:
            raise AcceldeployError(
                f"gateway_check.{key} must be a whole number from 1 (health checks in a row), "
                f"got {count!r}"
            )


def check_prometheus(name: str, value: Any) -> float:
    """A Prometheus duration above 0, in seconds (0 would be Prometheus's own default)."""
    seconds = durations.prometheus_seconds(value)
    if not seconds:
        raise AcceldeployError(
            f"{name} must be a Prometheus duration above 0: {durations.PROMETHEUS_SYNTAX}, "
            f"got {value!r}"
        )
    return seconds


# Bounded by a check of their own: a count or a share of the hosts, a program's durations.
CHECKS: dict[str, Callable[[Any], Any]] = {
    "vllm_service_serial": check_serial,
    "gateway_timeouts": check_gateway_timeouts,
    "gateway_check": check_gateway_check,
    "monitor_scrape_interval": partial(check_prometheus, "monitor_scrape_interval"),
    "monitor_retention": partial(check_prometheus, "monitor_retention"),
}


def names(role: str) -> list[str]:
    """The bounded variables of one role (what its check gathers)."""
    return [name for name in (*BOUNDS, *CHECKS) if name.startswith(f"{role}_")]


def number(name: str, value: Any) -> float:
    """The value of a bounded variable, refused naming it when it is not a number in range.
    Extra vars (-e) arrive as text: "3" is 3."""
    bound = BOUNDS[name]
    found: float | None = None
    if isinstance(value, bool):
        found = None
    elif isinstance(value, int) or (isinstance(value, str) and WHOLE.fullmatch(value)):
        found = int(value)
    elif isinstance(value, float) and (value.is_integer() or not bound.whole):
        found = value
    elif isinstance(value, str) and not bound.whole:
        try:
            found = float(value)
        except ValueError:
            found = None
    if found is None or not bound.low <= found <= bound.high:
        raise AcceldeployError(f"{name} must be {bound.describe()}, got {value!r}")
    return found


def role_errors(role: str, value_of: Callable[[str], Any]) -> list[str]:
    """One message per bounded variable of ``role`` out of its bounds, each variable's value as
    ``value_of`` reads it (a task's templated variable)."""
    return errors({name: value_of(name) for name in names(role)})


def errors(values: Mapping[str, Any]) -> list[str]:
    """{variable: value} -> one message per bounded variable out of its bounds."""
    messages = []
    for name, value in values.items():
        if name not in BOUNDS and name not in CHECKS:
            raise AcceldeployError(f"{name} has no bound in acceldeploy.inventory.bounds")
        try:
            CHECKS[name](value) if name in CHECKS else number(name, value)
        except AcceldeployError as exc:
            messages.append(str(exc))
    return messages
