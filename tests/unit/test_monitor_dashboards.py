"""The Grafana dashboards (acceldeploy.monitor.dashboards): every query they send, asked of the
distribution's own Prometheus over a backfilled history with the lab's labels, parses and
returns data, and narrows to the host and service picked; the label matchers go where PromQL
wants them; one panel per figure and per alert; the same bytes every render, from the CLI and
from the monitor role (in check mode too, and changing nothing the second time); vLLM's
series named as the stacks name them (from the inventory with -i), today's bytes with the
default stacks'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from promserver import needs_prometheus, openmetrics, prometheus, query

from acceldeploy import cli
from acceldeploy.monitor import dashboards, figures, rules

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = rules.settings({"ttft_slo": {"qwen3-vl": "2s"}})
LAB = {"host": "lab1", "service": "qwen3-vl"}
UNIT = "vllm-qwen3-vl.service"
# Twenty minutes of history, a sample every 15 s, ending a minute ago; queried at its end.
STEP, SAMPLES = 15, 80
END = float(int(time.time()) // STEP * STEP - 60)


def lab_series() -> list[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) of the lab's monitor: the scraped series the queries read, the
    recording rules' series and an ALERTS series for every alert of the rules."""
    vllm = {"job": "vllm", "instance": "127.0.0.1:8001", "platform": "cpu", **LAB}
    node = {"job": "node", "instance": "127.0.0.1:9101", "host": "lab1"}
    series = [
        ("up", vllm, 1.0),
        ("up", node, 1.0),
        ("vllm:num_requests_running", vllm, 2.0),
        ("vllm:num_requests_waiting", vllm, 0.0),
        ("vllm:kv_cache_usage_perc", vllm, 0.4),
        ("acceldeploy:requests:rate1m", LAB, 1.5),
        ("acceldeploy:generation_tokens:rate1m", LAB, 120.0),
        ("acceldeploy:ttft_seconds:p99_5m", LAB, 0.18),
        (rules.PREFIX_HIT, LAB, 0.7),
        ("node_systemd_unit_state", {**node, "name": UNIT, "state": "active"}, 1.0),
        ("node_systemd_service_restart_total", {**node, "name": UNIT}, 0.0),
        ("node_memory_MemAvailable_bytes", node, 8e9),
        ("node_memory_MemTotal_bytes", node, 16e9),
    ]
    series += [(rules.SERVICE_MEMORY, {**node, **LAB, "source": source}, 3e9)
               for source in ("pss", "rss", "cgroup")]  # fmt: skip
    for alert in dashboards.alert_rules(rules.document(SETTINGS)):
        labels = {"alertname": alert["alert"], "alertstate": "firing", **LAB,
                  "severity": alert["labels"]["severity"]}  # fmt: skip
        series.append(("ALERTS", labels, 1.0))
    return series


@pytest.fixture(scope="module")
def lab_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    history = openmetrics(
        (metric, labels, END - STEP * i, value)
        for metric, labels, value in lab_series()
        for i in range(SAMPLES)
    )
    with prometheus(tmp_path_factory.mktemp("prometheus"), history=history) as base:
        yield base


def asked(base: str, promql: str) -> list[dict[str, Any]]:
    try:
        return query(base, promql, at=END)
    except urllib.error.HTTPError as error:  # a query Prometheus refuses: its reason
        raise AssertionError(f"{promql}: {error.read().decode()}") from error


def every_dashboard() -> list[tuple[str, dict[str, Any]]]:
    return list(dashboards.build(SETTINGS).items())


@needs_prometheus
@pytest.mark.parametrize(("host", "service"), [(".*", ".*"), ("lab1", "qwen3-vl")])
def test_every_query_parses_and_returns_the_labs_series(
    lab_prometheus: str, host: str, service: str
) -> None:
    for name, board in every_dashboard():
        queries = dashboards.panel_queries(board, host=host, service=service)
        assert len(queries) > 5, name
        for promql in queries:
            assert asked(lab_prometheus, promql), f"{name}: no data for {promql}"


@needs_prometheus
def test_another_host_or_service_narrows_every_query_to_nothing(lab_prometheus: str) -> None:
    for name, board in every_dashboard():
        for promql in dashboards.panel_queries(board, host="lab9", service="qwen3-vl"):
            assert asked(lab_prometheus, promql) == [], f"{name}: {promql} ignores the host"
    fleet = dashboards.build(SETTINGS)["acceldeploy-fleet.json"]
    for promql in dashboards.panel_queries(fleet, host="lab1", service="other"):
        assert asked(lab_prometheus, promql) == [], f"{promql} ignores the service"


@needs_prometheus
def test_the_variables_list_the_labs_hosts_and_services(lab_prometheus: str) -> None:
    found = {}
    for _, board in every_dashboard():
        for selector, label in dashboards.variable_selectors(board):
            found[selector] = {s["metric"][label] for s in asked(lab_prometheus, selector)}
    assert found == {'up{job="vllm"}': {"lab1"}, 'up{job="vllm",host=~".*"}': {"qwen3-vl"},
                     'up{job="node"}': {"lab1"}}  # fmt: skip


@pytest.mark.parametrize(
    ("query", "filtered"),
    [("acceldeploy:requests:rate1m", 'acceldeploy:requests:rate1m{host=~"$host",service=~"$service"}'),
     ('up{job="vllm"}', 'up{job="vllm",host=~"$host",service=~"$service"}'),
     ('up{job="vllm", }', 'up{job="vllm",host=~"$host",service=~"$service"}'),
     ("up{}", 'up{host=~"$host",service=~"$service"}'),
     ('x{name=~"a}|b"}', 'x{name=~"a}|b",host=~"$host",service=~"$service"}')],
)  # fmt: skip
def test_the_matchers_go_inside_the_selector(query: str, filtered: str) -> None:
    assert dashboards.filtered(query) == filtered


@pytest.mark.parametrize("query", ["rate(x[5m])", "a + b", 'sum(up{job="vllm"})', ""])
def test_a_query_that_is_not_one_selector_is_refused(query: str) -> None:
    with pytest.raises(ValueError, match="not a single vector selector"):
        dashboards.filtered(query)


def test_one_panel_per_figure_and_per_alert() -> None:
    board = dashboards.build(SETTINGS)["acceldeploy-fleet.json"]
    titles = [p["title"] for p in board["panels"]]
    alerts = {a["alert"] for a in dashboards.alert_rules(rules.document(SETTINGS))}
    assert {f.title for f in figures.FIGURES} | alerts <= set(titles)
    assert len(titles) == len(set(titles))
    ids = [p["id"] for p in board["panels"]]
    assert ids == list(range(1, len(ids) + 1))
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in board["panels"])
    # no SLO, no SLO alert: the dashboard follows the rules deployed
    default = dashboards.build(rules.settings({}))["acceldeploy-fleet.json"]
    assert "VllmTtftOverSlo" not in [p["title"] for p in default["panels"]]


def test_the_kv_cache_panel_draws_the_alerts_threshold() -> None:
    board = dashboards.build(rules.settings({"kv_cache_high": 0.8}))["acceldeploy-fleet.json"]
    (panel,) = [p for p in board["panels"] if p["title"] == figures.BY_KEY["kv_cache"].title]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 0.8]
    assert "VllmKvCacheFull" in panel["description"]


def test_rendering_again_gives_the_same_bytes() -> None:
    first = dashboards.files(SETTINGS)
    assert dashboards.files(rules.settings({"ttft_slo": {"qwen3-vl": "2s"}})) == first
    for text in first.values():
        assert dashboards.text(json.loads(text)) == text


def test_the_command_writes_the_same_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["dashboards", "--out", str(tmp_path / "out")]) == 0
    written = capsys.readouterr().out.splitlines()
    expected = dashboards.files(rules.settings({}))
    assert written == [str(tmp_path / "out" / name) for name in expected]
    for name, text in expected.items():
        assert (tmp_path / "out" / name).read_text() == text


def test_a_stacks_names_flow_into_the_figures_and_the_panels() -> None:
    renamed = {"running": "vllm:requests_running", "kv_cache_usage": "vllm:kv_cache_used_ratio"}
    settings = rules.settings({"metrics": renamed, "kv_cache_high": 0.8})
    shown = {f.key: f for f in figures.figures(settings.metrics)}
    assert shown["running"].query == 'vllm:requests_running{job="vllm"}'
    assert shown["running"].metric == "vllm:requests_running"
    assert [f.title for f in shown.values()] == [f.title for f in figures.FIGURES]
    board = dashboards.build(settings)["acceldeploy-fleet.json"]
    assert 'vllm:requests_running{job="vllm",host=~".*",service=~".*"}' in (
        dashboards.panel_queries(board)
    )
    text = "".join(dashboards.files(settings).values())
    assert "vllm:num_requests_running" not in text and "vllm:kv_cache_usage_perc" not in text
    # the KV cache's line: its alert watches the figure's own series, under its new name
    (panel,) = [p for p in board["panels"] if p["title"] == shown["kv_cache"].title]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 0.8]


def test_the_default_stacks_names_give_todays_dashboards() -> None:
    """A regression check: the dashboards rendered before their vLLM series came from the
    stacks (tests/data/monitor/dashboards-default/), byte for byte."""
    recorded = ROOT / "tests/data/monitor/dashboards-default"
    rendered = dashboards.files(SETTINGS)
    assert sorted(rendered) == sorted(p.name for p in recorded.iterdir())
    for name, text in rendered.items():
        assert (recorded / name).read_text() == text, name


def test_the_command_names_the_inventorys_series(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_monitor_targets import lab, renaming

    moved = {
        "acceldeploy_stack": "cpu-vllm-0.13.0",
        "python_env_stacks_file": renaming(tmp_path / "s", running="vllm:requests_running"),
    }
    lab(tmp_path / "moved", lab1=moved, lab2=moved)
    out = tmp_path / "out"
    assert cli.main(["dashboards", "-i", str(tmp_path / "moved/hosts.yml"), "--out", str(out)]) == 0
    capsys.readouterr()
    expected = dashboards.files(rules.settings({"metrics": {"running": "vllm:requests_running"}}))
    for name, text in expected.items():
        assert (out / name).read_text() == text
    assert "vllm:requests_running" in (out / "acceldeploy-fleet.json").read_text()
    lab(tmp_path / "half", lab2=moved)  # half moved: the series recorded from both names
    assert cli.main(["dashboards", "-i", str(tmp_path / "half/hosts.yml"), "--out", str(out)]) == 0
    fleet = (out / "acceldeploy-fleet.json").read_text()
    assert "acceldeploy:vllm_running" in fleet and "vllm:requests_running" not in fleet


def test_the_role_writes_them_in_check_mode_idempotently(tmp_path: Path) -> None:
    """The monitor role's plan and grafana tasks on this machine as a monitor (local
    connection): check mode previews, the first run writes, the second changes nothing."""
    out = tmp_path / "dashboards"
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {"monitors": {"hosts": {
        "mon1": {"ansible_host": "127.0.0.1", "ansible_connection": "local",
                 "ansible_python_interpreter": sys.executable}}}}}}))  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps([{"hosts": "monitors", "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "acceldeploy.fleet.monitor",
                                                    "tasks_from": tasks}}
                  for tasks in ("plan", "grafana")]}]))  # fmt: skip

    def play(*extra: str) -> dict[str, int]:
        run = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml",
             "-e", f"monitor_grafana_dashboards_dir={out}", *extra],
            capture_output=True, text=True, check=False, cwd=tmp_path,
            env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                 "PYTHONPATH": str(ROOT / "tools"), "ANSIBLE_NOCOLOR": "1",
                 "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
                 "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"},
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        return dict(json.loads(run.stdout)["stats"]["mon1"])

    assert play("--check")["changed"] == 2  # the directory, the files (one looped task)
    assert not out.exists()
    assert play()["changed"] == 2
    assert play()["changed"] == play("--check")["changed"] == 0
    for name, text in dashboards.files(rules.settings({})).items():
        assert (out / name).read_text() == text
        assert (out / name).stat().st_mode & 0o777 == 0o644
