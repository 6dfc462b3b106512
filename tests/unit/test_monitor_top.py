"""`acceldeploy top`'s readings (acceldeploy.monitor.top): from vLLM 0.12's own /metrics
(recorded on the lab), where two readings make a rate, and from a stack's that renames a
series; and from a real Prometheus holding a backfilled quarter hour of two services, one of
them leaking and one down, its vLLM series named as the fleet's stacks name them."""

from __future__ import annotations

import io
import time
from pathlib import Path

from promserver import needs_prometheus, openmetrics, prometheus

from acceldeploy.monitor import rules
from acceldeploy.monitor.promapi import Api
from acceldeploy.watch import top

METRICS = (Path(__file__).parents[1] / "data/recorded/vllm-0.12.0-cpu-metrics.txt").read_text()
LAB1, LAB2 = ("lab1", "qwen3-vl"), ("lab2", "qwen3-vl")


def later(text: str) -> str:
    """The same exposition 10 requests and 100 tokens later."""
    return (
        text.replace('finished_reason="length",model_name="qwen3-vl"} 88.0',
                     'finished_reason="length",model_name="qwen3-vl"} 98.0')
        .replace('vllm:generation_tokens_total{engine="0",model_name="qwen3-vl"} 1407.0',
                 'vllm:generation_tokens_total{engine="0",model_name="qwen3-vl"} 1507.0')
    )  # fmt: skip


def cells(snap: top.Snapshot) -> dict[top.Key, dict[str, str]]:
    return {(r[0], r[1]): dict(zip(top.HEADERS[2:], r[2:], strict=True)) for r in top.rows(snap)}


def test_direct_readings_turn_counters_into_rates_and_name_a_silent_service_down() -> None:
    first = top.from_metrics({LAB1: METRICS, LAB2: None}, None, at=100.0)
    assert cells(first)[LAB1]["req/s"] == "-"  # one reading: no rate yet
    second = top.from_metrics({LAB1: later(METRICS), LAB2: None}, first, at=102.0)
    row = cells(second)[LAB1]
    assert row["state"] == "serving"
    assert (row["req/s"], row["tok/s"]) == ("5.0", "50.0")
    assert (row["run"], row["KV"]) == ("0", "0%")
    assert row["hit"] == "-"  # no prefix-cache query between the readings
    assert row["memory"] == "-"  # memory needs the monitor
    assert cells(second)[LAB2]["state"] == "DOWN"


def test_the_prefix_cache_hit_rate_is_the_hits_over_the_queries_between_two_readings() -> None:
    first = top.from_metrics({LAB1: METRICS}, None, at=100.0)
    queried = METRICS.replace(
        'vllm:prefix_cache_queries_total{engine="0",model_name="qwen3-vl"} 4171.0',
        'vllm:prefix_cache_queries_total{engine="0",model_name="qwen3-vl"} 5171.0',
    ).replace(
        'vllm:prefix_cache_hits_total{engine="0",model_name="qwen3-vl"} 0.0',
        'vllm:prefix_cache_hits_total{engine="0",model_name="qwen3-vl"} 700.0',
    )
    second = top.from_metrics({LAB1: queried}, first, at=102.0)
    assert cells(second)[LAB1]["hit"] == "70%"


def test_a_busy_row_fits_an_80_column_terminal_whole() -> None:
    from rich.console import Console

    busy = {"up": 1.0, "running": 12, "waiting": 3, "kv_cache": 0.42, "prefix_hit": 0.71,
            "requests": 12.1, "tokens": 812.5, "ttft_p99": 1.25, "memory": 12.5 * 2**30,
            "trend": -27.9 * 2**20}  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=80).print(top.table(top.Snapshot(values={LAB1: busy}), "top"))
    assert "…" not in out.getvalue(), out.getvalue()
    assert "lab1/qwen3-vl serving  12    3 42% 71%  12.1 812.5  1250 ms" in out.getvalue()


def test_direct_readings_use_each_services_own_stacks_names() -> None:
    """lab2's stack renames the running gauge: its /metrics is read with that name, lab1's
    (no names given: vLLM 0.12's) with the default."""
    renamed = METRICS.replace(
        'vllm:num_requests_running{engine="0",model_name="qwen3-vl"} 0.0',
        'vllm:requests_running{engine="0",model_name="qwen3-vl"} 4.0',
    )
    names = {LAB2: {**rules.DEFAULT_SERIES, "running": "vllm:requests_running"}}
    snap = top.from_metrics({LAB1: METRICS, LAB2: renamed}, None, at=100.0, metrics=names)
    assert (cells(snap)[LAB1]["run"], cells(snap)[LAB2]["run"]) == ("0", "4")
    unnamed = top.from_metrics({LAB2: renamed}, None, at=100.0)
    assert cells(unnamed)[LAB2]["run"] == "-"  # the default name is not in its exposition


def series(now: float, running: str = "vllm:num_requests_running") -> str:
    rows = []
    for i in range(0, 900, 15):
        at = now - 900 + i
        for host, memory in (
            ("lab1", 2**30 + i // 15 * 2**20),
            ("lab2", 2**30),
        ):  # lab1: +4 MiB/min
            labels = {"host": host, "service": "qwen3-vl"}
            rows.append(
                ("acceldeploy_service_memory_bytes", {**labels, "source": "pss"}, at, memory)
            )
            rows.append(("acceldeploy:requests:rate1m", labels, at, 2.5))
            rows.append((running, {**labels, "job": "vllm"}, at, 3))
            rows.append(("vllm:kv_cache_usage_perc", {**labels, "job": "vllm"}, at, 0.42))
            rows.append(("up", {**labels, "job": "vllm"}, at, 1 if host == "lab1" else 0))
    return openmetrics(rows)


@needs_prometheus
def test_prometheus_readings_show_each_service_its_trend_and_its_alerts(tmp_path: Path) -> None:
    now = time.time()
    alerts = [{"state": "firing", "labels": {"alertname": "VllmServiceDown", **dict(zip(("host", "service"), LAB2, strict=True))}},
              {"state": "pending", "labels": {"alertname": "ScrapeFailing", "host": "lab2", "job": "node"}},
              {"state": "inactive", "labels": {"alertname": "VllmKvCacheFull", "host": "lab1", "service": "qwen3-vl"}}]  # fmt: skip
    with prometheus(tmp_path, series(now)) as base:
        snap = top.from_prometheus(Api(base).query, alerts, [LAB1, LAB2, ("lab9", "other")], now)
    table = cells(snap)
    one, two = table[LAB1], table[LAB2]
    assert (one["state"], two["state"]) == ("serving", "DOWN")
    assert (one["run"], one["KV"], one["req/s"]) == (
        "3",
        "42%",
        "2.5",
    )
    assert one["memory"].endswith("GiB")
    assert one["trend 15m"] == "+240 MiB/h"
    assert two["trend 15m"] == "flat"
    assert (one["alerts"], two["alerts"]) == ("", "VllmServiceDown, ScrapeFailing (pending)")
    assert table[("lab9", "other")]["state"] == "-"  # expected, never scraped
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=250).print(top.table(snap, "acceldeploy top"))
    assert "lab2" in out.getvalue() and "VllmServiceDown" in out.getvalue()


@needs_prometheus
def test_prometheus_readings_use_the_fleets_names(tmp_path: Path) -> None:
    now = time.time()
    with prometheus(tmp_path, series(now, running="vllm:requests_running")) as base:
        renamed = {**rules.DEFAULT_SERIES, "running": "vllm:requests_running"}
        snap = top.from_prometheus(Api(base).query, [], [LAB1], now, renamed)
        default = top.from_prometheus(Api(base).query, [], [LAB1], now)
    assert (cells(snap)[LAB1]["run"], cells(default)[LAB1]["run"]) == ("3", "-")
