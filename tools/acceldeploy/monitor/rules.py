"""The fleet's alert and recording rules, as one definition (Prometheus's rule file, checked by
`promtool check rules` and unit-tested with `promtool test rules`). Each alert carries a
runbook line naming the acceldeploy command to run next.

Memory growth is bench's leak-or-cache question asked continuously: a cache fills to a
plateau and stays there; a leak under the same traffic keeps climbing. So a series rises when
the lowest reading of the last window sits above the highest of the window two windows back
by more than the noise band (bench's floors: 64 MiB for a process tree, 256 MiB for device
memory), with requests served in both. The alert fires when it keeps rising for `for:`: a
cache that fills in less than that never fires, a leak fires about two windows plus `for:`
after it starts.

The vLLM series the rules read are named by role (SERIES_ROLES, planner.stacks.DEFAULT_METRICS):
Settings.metrics gives their names, those of the stacks the monitors scrape
(targets.series), so a stack that renames a series renders the rules with its name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.stacks import DEFAULT_METRICS

MIB = 1 << 20
# The project's own series (the memory unit on each host, node exporter's textfile collector).
SERVICE_MEMORY = "acceldeploy_service_memory_bytes"
# The device exporters' memory in use: MindCluster's npu-exporter (MB), Habana's (bytes).
NPU_HBM_USED_MB = "npu_chip_info_hbm_used_memory"
NPU_HBM_USED_BYTES = "acceldeploy:npu_hbm_used:bytes"  # recorded from it
GAUDI_MEMORY_USED = "habanalabs_memory_used_bytes"
DURATION_UNITS = ("ms", "s", "m", "h", "d")
# The roles of vLLM's series the rules and the figures (figures.py) read: every PromQL string
# of the monitor that names a vLLM series takes it from Settings.metrics by one of these.
SERIES_ROLES = ("running", "waiting", "kv_cache_usage", "preemptions", "requests",
                "generation_tokens", "time_to_first_token", "prefix_cache_queries",
                "prefix_cache_hits")  # fmt: skip
# The prefix cache's hit rate: per service, and per model over every server (the fleet's: what
# the gateway's routing leaves in the engines' caches).
PREFIX_HIT = "acceldeploy:prefix_cache_hit_ratio:rate5m"
FLEET_PREFIX_HIT = "acceldeploy:prefix_cache_hit_ratio:fleet_rate5m"
# Their names when the monitors scrape no stack that says otherwise: vLLM 0.12's.
DEFAULT_SERIES: dict[str, str] = {role: DEFAULT_METRICS[role] for role in SERIES_ROLES}
# A Prometheus metric name: what a series name must be to go into PromQL as it is.
METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# A role the scraped stacks name differently is read as this recorded series: each target's
# own name under one (`a or b`: a target exports one of them), its labels kept.
UNIFIED = "acceldeploy:vllm_{role}"
# Read through their _bucket (and _sum, _count) series, each recorded the same way.
HISTOGRAM_ROLES = {"time_to_first_token": ("_bucket", "_sum", "_count")}


@dataclass(frozen=True)
class Settings:
    """The monitor role's rule variables (monitor_alert_for, monitor_growth_*, ...)."""

    alert_for: Mapping[str, str] = field(default_factory=dict)
    kv_cache_high: float = 0.9
    # the alert's share of the day before's fleet hit rate (monitor_prefix_cache_drop)
    prefix_cache_drop: float = 0.5
    growth_window: str = "30m"
    growth_band_mib: Mapping[str, int] = field(default_factory=dict)
    # {service: seconds}: p99 TTFT goals (monitor_ttft_slo)
    ttft_slo: Mapping[str, float] = field(default_factory=dict)
    # {role: the series name every query reads} of SERIES_ROLES: the scraped stacks' name, or,
    # where they name it differently, the series recorded from their names (UNIFIED)
    metrics: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SERIES))
    # {role: the stacks' names} of the roles they name differently (targets.series's "a|b")
    alternatives: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


FOR_DEFAULTS = {
    # a dead engine is not a blip: two failed scrapes at a 15 s interval, then some
    "down": "1m",
    "restart_loop": "0m",
    # a full KV cache for a moment is a busy service; for ten minutes it is too small
    "kv_cache": "10m",
    "queue": "5m",
    "preemptions": "10m",
    "ttft": "10m",
    "ray_node": "2m",
    # a rank rejoins within a minute when the group heals by itself (docs/operations/multi-node)
    "group_node": "2m",
    "scrape": "5m",
    # the fleet's prefix-cache hits under half of the day before's: a routing change, or
    # servers flapping in and out of the gateway
    "prefix_cache": "15m",
    # a second window in a row: one window above the last can be a new, larger working set
    "growth": "30m",
}
BAND_DEFAULTS = {"process": 64, "device": 256}


def _duration(value: Any, var: str) -> str:
    text = str(value).strip()
    number = text.rstrip("".join(set("".join(DURATION_UNITS))))
    unit = text[len(number) :]
    if not number.isdigit() or unit not in DURATION_UNITS:
        raise AcceldeployError(f"{var}: {value!r} is not a duration like 30s, 5m or 1h")
    return text


def settings(raw: Mapping[str, Any]) -> Settings:
    """From the role's variables (monitor_<field>), every value checked, naming it."""
    alert_for = {**FOR_DEFAULTS, **dict(raw.get("alert_for") or {})}
    unknown = sorted(set(alert_for) - set(FOR_DEFAULTS))
    if unknown:
        raise AcceldeployError(
            f"monitor_alert_for.{unknown[0]}: no such alert; known: {', '.join(FOR_DEFAULTS)}"
        )
    for key, value in alert_for.items():
        _duration(value, f"monitor_alert_for.{key}")
    kv = float(raw.get("kv_cache_high", 0.9))
    if not 0 < kv <= 1:
        raise AcceldeployError(f"monitor_kv_cache_high must be a share in (0, 1], got {kv}")
    drop = float(raw.get("prefix_cache_drop", 0.5))
    if not 0 < drop < 1:
        raise AcceldeployError(
            f"monitor_prefix_cache_drop must be a share in (0, 1) of the day before's fleet "
            f"prefix-cache hit rate, got {drop}"
        )
    bands = {**BAND_DEFAULTS, **dict(raw.get("growth_band_mib") or {})}
    if set(bands) != set(BAND_DEFAULTS) or any(int(v) <= 0 for v in bands.values()):
        raise AcceldeployError("monitor_growth_band_mib must give process and device, in MiB > 0")
    slo = {}
    for name, value in dict(raw.get("ttft_slo") or {}).items():
        slo[str(name)] = seconds(value, f"monitor_ttft_slo.{name}")
    window = _duration(raw.get("growth_window") or "30m", "monitor_growth_window")
    mib = {k: int(v) for k, v in bands.items()}
    names, alternatives = series_names(raw.get("metrics") or {})
    return Settings(alert_for, kv, drop, window, mib, slo, names, alternatives)


def series_names(
    given: Mapping[str, Any],
) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """({role: the name queries read}, {role: the stacks' names}) over DEFAULT_SERIES: only the
    monitor's roles, each a metric name, or several joined by "|" (targets.series: stacks
    that name it differently), read as the series UNIFIED records from them."""
    unknown = sorted(set(given) - set(SERIES_ROLES))
    if unknown:
        raise AcceldeployError(
            f"the monitor's vLLM series: no role {', '.join(unknown)}; known: "
            f"{', '.join(SERIES_ROLES)}"
        )
    names, alternatives = {}, {}
    for role, text in {**DEFAULT_SERIES, **{str(k): str(v) for k, v in given.items()}}.items():
        parts = tuple(text.split("|"))
        for name in parts:
            if not METRIC_NAME.fullmatch(name):
                raise AcceldeployError(
                    f"the monitor's vLLM series {role}: {name!r} is not a Prometheus metric name"
                )
        names[role] = parts[0] if len(parts) == 1 else UNIFIED.format(role=role)
        if len(parts) > 1:
            alternatives[role] = parts
    return names, alternatives


def unified_records(s: Settings) -> list[dict[str, str]]:
    """The recording rules that read each role the stacks name differently under one name."""
    records = []
    for role, names in sorted(s.alternatives.items()):
        for suffix in HISTOGRAM_ROLES.get(role, ("",)):
            expr = " or ".join(f"{name}{suffix}" for name in names)
            records.append({"record": f"{s.metrics[role]}{suffix}", "expr": expr})
    return records


def seconds(value: Any, var: str) -> float:
    """A duration variable (30s, 5m, 1h) in seconds, checked, naming the variable."""
    return _seconds(_duration(value, var))


def _seconds(duration: str) -> float:
    unit = next(u for u in DURATION_UNITS if duration.endswith(u) and duration[: -len(u)].isdigit())
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return int(duration[: -len(unit)]) * scale


def minutes(seconds: float) -> str:
    """90m, 30s: a window as the alerts' summaries and the report name it."""
    return f"{seconds / 60:g}m" if seconds >= 60 else f"{seconds:g}s"


def _alert(
    name: str, expr: str, wait: str, severity: str, summary: str, runbook: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": wait,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "runbook": runbook},
    }


def _growth(name: str, series: str, band_bytes: int, s: Settings, what: str) -> dict[str, Any]:
    window = s.growth_window
    seconds = _seconds(window)
    back = f"{seconds * 2:g}s"
    then = f"from {minutes(seconds * 3)} to {minutes(seconds * 2)} ago"
    requests = s.metrics["requests"]
    served = (
        f"sum by (host) (rate({requests}[{window}])) > 0"
        f" and sum by (host) (rate({requests}[{window}] offset {back})) > 0"
    )
    expr = (
        f"(min_over_time({series}[{window}]) - max_over_time({series}[{window}] offset {back}))"
        f" > {band_bytes} and on (host) ({served})"
    )
    return _alert(
        name, expr, s.alert_for["growth"], "warning",
        f"{what} on {{{{ $labels.host }}}} keeps growing under traffic: its lowest reading of "
        f"the last {window} is {{{{ $value | humanize1024 }}}}B above its highest {then}",
        "a cache levels off and a leak does not: confirm with identical rounds, "
        "`acceldeploy bench -i <inventory> --profile smoke --limit {{ $labels.host }}` "
        "(its verdict says bounded or growing)",
    )  # fmt: skip


def document(s: Settings) -> dict[str, Any]:
    """The rule file: one group of recording rules, one of alerts."""
    f, m = s.alert_for, s.metrics
    verify = "acceldeploy verify -i <inventory> --limit {{ $labels.host }}"
    alerts = [
        _alert("VllmServiceDown", 'up{job="vllm"} == 0', f["down"], "critical",
               "{{ $labels.service }} on {{ $labels.host }} does not answer /metrics",
               f"{verify}; on the host, systemctl status {{{{ $labels.service }}}}"),
        _alert("VllmServiceRestartLoop",
               'increase(node_systemd_service_restart_total{name=~".+\\\\.service"}[15m]) >= 3',
               f["restart_loop"], "critical",
               "{{ $labels.name }} on {{ $labels.host }} restarted "
               "{{ $value | humanize }} times in 15 minutes",
               "on the host, journalctl -u {{ $labels.name }} -n 50; a bad deploy rolls back "
               "with `ansible-playbook site.yml -i <inventory> --limit {{ $labels.host }}` "
               "on the last good inventory"),
        _alert("VllmKvCacheFull", f'{m["kv_cache_usage"]}{{job="vllm"}} > {s.kv_cache_high}',
               f["kv_cache"], "warning",
               "{{ $labels.service }} on {{ $labels.host }}: KV cache "
               "{{ $value | humanizePercentage }} full",
               "more KV room or fewer sequences: `acceldeploy tune -i <inventory> --host "
               "{{ $labels.host }} --service {{ $labels.service }} --space "
               "'max_num_seqs=...' ...`"),
        _alert("VllmQueueGrowing",
               f'{m["waiting"]}{{job="vllm"}} > 0 '
               f'and deriv({m["waiting"]}{{job="vllm"}}[5m]) > 0',
               f["queue"], "warning",
               "{{ $labels.service }} on {{ $labels.host }}: the waiting queue keeps growing",
               "the service takes less than it is sent: `acceldeploy bench -i <inventory> "
               "--via-gateway <gateway> --profile <profile>` for the fleet's capacity"),
        _alert("VllmPreempting", f'increase({m["preemptions"]}{{job="vllm"}}[5m]) > 0',
               f["preemptions"], "warning",
               "{{ $labels.service }} on {{ $labels.host }} preempted "
               "{{ $value | humanize }} requests in 5 minutes",
               "the KV cache is too small for the batch: `acceldeploy tune` on "
               "max_num_seqs / the KV space"),
        _alert("RayNodeMissing", 'up{job="ray"} == 0', f["ray_node"], "critical",
               "Ray on {{ $labels.host }} ({{ $labels.service }}) does not answer",
               f"{verify}; on the host, systemctl status ray-{{{{ $labels.service }}}}"),
        _alert("HeadlessNodeDown",
               'node_systemd_unit_state{name=~"(dp|node)-.+\\\\.service",state="active"} == 0',
               f["group_node"], "critical",
               "{{ $labels.name }} on {{ $labels.host }}, a headless node of a multi-node group, "
               "is not running: the group's head fails its requests until it rejoins",
               "on the host, journalctl -u {{ $labels.name }} -n 50 and the readiness gate: "
               "`ansible-playbook site.yml -i <inventory> --limit <the group's nodes>`"),
        _alert("ScrapeFailing", 'up{job!~"vllm|ray"} == 0', f["scrape"], "warning",
               "{{ $labels.job }} on {{ $labels.host }} cannot be scraped",
               "on the host, systemctl status of the exporter; "
               "`ansible-playbook site.yml -i <inventory> --tags monitor`"),
        _alert("PrefixCacheHitsDropped",
               f"{FLEET_PREFIX_HIT} < {s.prefix_cache_drop:g} * "
               f"avg_over_time({FLEET_PREFIX_HIT}[1d] offset 1h) "
               f'and sum by (service) (rate({m["prefix_cache_queries"]}{{job="vllm"}}[5m])) > 0',
               f["prefix_cache"], "warning",
               "{{ $labels.service }}: the fleet's prefix-cache hit rate is "
               "{{ $value | humanizePercentage }}, under "
               f"{s.prefix_cache_drop:g}x the day before's",
               "conversations no longer find their cache: is the gateway's routing "
               "affinity (gateway_routing), and do servers leave its rotation (`acceldeploy "
               "verify -i <inventory>`)? `acceldeploy bench -i <inventory> --via-gateway "
               "<gateway> --profile conversations` gives the fleet's hit rate"),
        _growth("ServiceMemoryGrowing", f'{SERVICE_MEMORY}{{source="pss"}}',
                s.growth_band_mib["process"] * MIB, s, "{{ $labels.service }}'s memory"),
        _growth("NpuMemoryGrowing", NPU_HBM_USED_BYTES,
                s.growth_band_mib["device"] * MIB, s, "NPU {{ $labels.id }}'s HBM"),
        _growth("GaudiMemoryGrowing", GAUDI_MEMORY_USED,
                s.growth_band_mib["device"] * MIB, s, "HPU {{ $labels.UUID }}'s memory"),
    ]  # fmt: skip
    for service, seconds in sorted(s.ttft_slo.items()):
        alerts.append(_alert(
            "VllmTtftOverSlo",
            f'acceldeploy:ttft_seconds:p99_5m{{service="{service}"}} > {seconds:g}',
            f["ttft"], "warning",
            f"{service} on {{{{ $labels.host }}}}: p99 TTFT {{{{ $value | humanizeDuration }}}} "
            f"over its goal of {seconds:g} s",
            "`acceldeploy bench -i <inventory> --limit {{ $labels.host }} --service "
            f"{service} --profile <profile>` against its baseline, then `acceldeploy tune`",
        ))  # fmt: skip
    records = [
        {"record": "acceldeploy:ttft_seconds:p99_5m",
         "expr": "histogram_quantile(0.99, sum by (le, host, service) "
                 f'(rate({m["time_to_first_token"]}_bucket{{job="vllm"}}[5m])))'},
        {"record": "acceldeploy:generation_tokens:rate1m",
         "expr": f'sum by (host, service) (rate({m["generation_tokens"]}{{job="vllm"}}[1m]))'},
        {"record": NPU_HBM_USED_BYTES, "expr": f"{NPU_HBM_USED_MB} * {MIB}"},
        {"record": "acceldeploy:requests:rate1m",
         "expr": f'sum by (host, service) (rate({m["requests"]}{{job="vllm"}}[1m]))'},
        {"record": PREFIX_HIT,
         "expr": f'sum by (host, service) (rate({m["prefix_cache_hits"]}{{job="vllm"}}[5m])) / '
                 f'sum by (host, service) (rate({m["prefix_cache_queries"]}{{job="vllm"}}[5m]))'},
        {"record": FLEET_PREFIX_HIT,
         "expr": f'sum by (service) (rate({m["prefix_cache_hits"]}{{job="vllm"}}[5m])) / '
                 f'sum by (service) (rate({m["prefix_cache_queries"]}{{job="vllm"}}[5m]))'},
    ]  # fmt: skip
    records = [*unified_records(s), *records]
    return {"groups": [{"name": "acceldeploy-records", "rules": records},
                       {"name": "acceldeploy-alerts", "rules": alerts}]}  # fmt: skip
