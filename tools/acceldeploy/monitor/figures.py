"""The figures an operator reads about each service, as one definition: `acceldeploy top`'s
columns, `acceldeploy report`'s plots and the Grafana dashboards' panels all come from
FIGURES, and each query is PromQL over the series the monitor scrapes (vLLM's /metrics, the
memory unit's textfile series) or the recording rules of monitor/rules.py.

Every query keeps the `host` and `service` labels, so one series is one service. The vLLM
series are named by role (rules.SERIES_ROLES): ``figures(metrics)`` renders them with the
names of the stacks the monitors scrape (targets.series; the same names as the rules);
FIGURES with vLLM 0.12's (rules.DEFAULT_SERIES), which every stack of versions/stacks.yml
exports today. Titles, keys and units do not depend on the names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from acceldeploy.monitor import rules


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    # PromQL: one series per (host, service)
    query: str
    # how it reads: count, ratio (0..1), per_second, seconds, bytes
    unit: str
    # the vLLM series it comes from, when `top` reads /metrics directly (no Prometheus):
    # a gauge read as is, or a counter turned into a rate
    metric: str = ""
    counter: bool = False
    # a counter this one's rise is divided by (a hit rate: hits over queries)
    over: str = ""


def figures(metrics: Mapping[str, str] = rules.DEFAULT_SERIES) -> tuple[Figure, ...]:
    """The figures, their vLLM series named by `metrics` ({role: name}, rules.SERIES_ROLES)."""
    m = metrics
    return (
        Figure("up", "Serving", 'up{job="vllm"}', "count"),
        Figure("running", "Running requests", f'{m["running"]}{{job="vllm"}}', "count",
               metric=m["running"]),
        Figure("waiting", "Waiting requests", f'{m["waiting"]}{{job="vllm"}}', "count",
               metric=m["waiting"]),
        Figure("kv_cache", "KV cache used", f'{m["kv_cache_usage"]}{{job="vllm"}}', "ratio",
               metric=m["kv_cache_usage"]),
        Figure("prefix_hit", "Prefix-cache hit rate", rules.PREFIX_HIT, "ratio",
               metric=m["prefix_cache_hits"], counter=True, over=m["prefix_cache_queries"]),
        Figure("requests", "Requests served", "acceldeploy:requests:rate1m", "per_second",
               metric=m["requests"], counter=True),
        Figure("tokens", "Generated tokens", "acceldeploy:generation_tokens:rate1m",
               "per_second", metric=m["generation_tokens"], counter=True),
        Figure("ttft_p99", "p99 time to first token", "acceldeploy:ttft_seconds:p99_5m",
               "seconds"),
        Figure("memory", "Process tree memory (PSS)", f'{rules.SERVICE_MEMORY}{{source="pss"}}',
               "bytes"),
    )  # fmt: skip


FIGURES = figures()
BY_KEY = {f.key: f for f in FIGURES}


def text(value: float | None, unit: str) -> str:
    """A figure as a person reads it: 3, 42%, 12.5/s, 180 ms, 1.2 GiB; "-" when missing."""
    if value is None or value != value:  # NaN: a quantile of no requests
        return "-"
    if unit == "ratio":
        return f"{value * 100:.0f}%"
    if unit == "per_second":
        return f"{value:.1f}/s"
    if unit == "seconds":
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    if unit == "bytes":
        for size, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= size:
                return f"{value / size:.1f} {suffix}"
        return f"{value:.0f} B"
    return f"{value:g}"
