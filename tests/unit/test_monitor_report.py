"""`acceldeploy report` (acceldeploy.monitor.report, cli/report.py) against the distribution's
own Prometheus on loopback, with a day of two services backfilled: lab1's memory leaks (5 MiB a
minute under traffic), lab2's fills a cache in its first hour and stays flat, and lab2 is killed
for 10 minutes six hours before the end, then recovers. The report plots the kill as a gap,
calls the leak growing and the cache bounded, and refuses a time it cannot read."""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from promserver import free_port, needs_prometheus, openmetrics, prometheus

from acceldeploy import cli
from acceldeploy.cli import report as report_cli
from acceldeploy.errors import AcceldeployError
from acceldeploy.monitor import growth, promapi, report, rules
from acceldeploy.watch import prometheus as watching

MIB = rules.MIB
INTERVAL = 60
DAY = 86400
END = float(int(time.time()) // INTERVAL * INTERVAL - 600)
KILLED = (END - 6 * 3600, END - 6 * 3600 + 600)  # lab2: no answer, up 0
SERVICE = {"lab1": "qwen3-vl", "lab2": "qwen3-8b"}
RATE = {"lab1": 2.0, "lab2": 3.5}  # requests per second


def memory(host: str, at: float) -> float:
    minutes = (at - (END - DAY)) / 60
    if host == "lab1":
        return 8192 * MIB + 5 * MIB * minutes
    return 6144 * MIB + min(minutes, 60) * 16 * MIB + (at // INTERVAL % 3) * 4 * MIB


def history() -> str:
    rows = []
    for at in range(int(END - DAY), int(END) + 1, INTERVAL):
        for host, service in SERVICE.items():
            down = host == "lab2" and KILLED[0] <= at < KILLED[1]
            vllm = {"job": "vllm", "host": host, "service": service}
            rows.append(("up", vllm, at, 0.0 if down else 1.0))
            if down:
                continue
            labels = {"host": host, "service": service}
            rows += [
                ("vllm:num_requests_running", vllm, at, 3.0),
                ("vllm:num_requests_waiting", vllm, at, 0.0),
                ("vllm:kv_cache_usage_perc", vllm, at, 0.4),
                ("acceldeploy:requests:rate1m", labels, at, RATE[host]),
                ("acceldeploy:generation_tokens:rate1m", labels, at, 250.0),
                ("acceldeploy:ttft_seconds:p99_5m", labels, at, 0.18),
                (rules.SERVICE_MEMORY, {**labels, "job": "node", "source": "pss"}, at,
                 memory(host, at)),
            ]  # fmt: skip
    return openmetrics(rows)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with prometheus(tmp_path_factory.mktemp("prometheus"), history()) as url:
        yield url


def utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@needs_prometheus
def test_a_day_shows_the_kill_and_the_recovery_and_the_leak(base: str, tmp_path: Path) -> None:
    window = report.Window(END - DAY, END)
    found = report.collect(base, window, rules.settings({}))
    index = report.write(found, tmp_path)

    assert index == tmp_path / "index.html"
    for key in ("up", "requests", "memory", "ttft_p99"):
        assert (tmp_path / f"{key}.png").read_bytes().startswith(b"\x89PNG"), key
    page = index.read_text()
    assert "lab1" in page and "qwen3-vl" in page and "lab2" in page and "qwen3-8b" in page

    plotted = json.loads((tmp_path / "series.json").read_text())["figures"]
    (up,) = [s["points"] for s in plotted["up"] if s["host"] == "lab2"]
    assert {v for t, v in up if KILLED[0] <= t < KILLED[1]} == {0.0}
    assert up[-1][1] == 1.0  # back
    (down,) = report.down_spans([(t, v) for t, v in up], window.step)
    assert (
        down[0] - window.step < KILLED[0] <= down[0]
        and KILLED[1] <= down[1] < KILLED[1] + window.step
    )
    (served,) = [s["points"] for s in plotted["requests"] if s["host"] == "lab2"]
    during = [v for t, v in served if KILLED[0] <= t < KILLED[1]]
    assert len(during) < 600 / window.step, served  # no data for part of the kill
    assert served[-1] == [END, RATE["lab2"]]
    xs, ys = report.with_gaps([(t, v) for t, v in served], window.step)
    gaps = [x for x, y in zip(xs, ys, strict=True) if math.isnan(y)]
    assert len(gaps) == 1 and KILLED[0] < gaps[0] < KILLED[1]  # the line breaks there only

    verdicts = {host: found.growth[(host, service)] for host, service in SERVICE.items()}
    assert verdicts["lab1"].state == "growing", verdicts["lab1"]
    assert verdicts["lab2"].state == "bounded", verdicts["lab2"]
    assert verdicts["lab1"].rise is not None and verdicts["lab1"].rise > 140 * MIB
    assert "<b>growing</b>" in page and "<b>bounded</b>" in page


@needs_prometheus
def test_the_command_writes_a_run_directory_and_names_it(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["report", "--prometheus", base, "--since", utc(END - 3 * 3600),
                     "--until", utc(END), "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    (run,) = tmp_path.iterdir()
    assert out.splitlines()[-1] == f"report: {run / 'index.html'}"
    assert "lab1/qwen3-vl: memory growing: its lowest reading of the last 30m" in out
    assert "lab2/qwen3-8b: memory bounded" in out
    assert len(list(run.glob("*.png"))) == len(report.FIGURES)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--since", "3x"], "argument --since: must be now, a duration back from now (30m, 24h"),
        (["--until", "yesterday"], "argument --until: must be now, a duration back"),
        (["--since", "1h", "--until", "2h"], "--since must be before --until"),
        ([], "give -i/--inventory (its monitor, through SSH) or --prometheus URL"),
        (["--prometheus", "http://127.0.0.1:9", "--monitor", "mon1"], "--monitor picks"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_fix(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = cli.main(["report", *args])
    except SystemExit as exit_:  # a usage error: argparse's
        code = int(str(exit_.code))
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("acceldeploy report: error: ") and err.count("\n") == 1, err
    assert named in err, err


def test_an_unreachable_prometheus_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert cli.main(["report", "--prometheus", f"http://127.0.0.1:{port}", "--timeout", "2"]) == 2
    assert f"Prometheus at http://127.0.0.1:{port} does not answer" in capsys.readouterr().err


def test_the_monitor_is_the_groups_host_or_named() -> None:
    mon = {"group_names": ["monitors"]}
    serving = {"group_names": ["fleet"]}
    assert watching.pick_monitor({"lab1": serving, "mon1": mon}, None) == ("mon1", mon)
    with pytest.raises(AcceldeployError, match=r"^no host in the monitors group: add one \(docs"):
        watching.pick_monitor({"lab1": serving}, None)
    with pytest.raises(AcceldeployError, match="2 hosts: pick one with --monitor"):
        watching.pick_monitor({"mon1": mon, "mon2": mon}, None)
    with pytest.raises(AcceldeployError, match="--monitor lab1: not in the monitors group"):
        watching.pick_monitor({"lab1": serving, "mon1": mon}, "lab1")
    settings = report_cli.growth_settings({"monitor_growth_window": "10m"})
    assert (settings.growth_window, settings.growth_band_mib) == ("10m", rules.BAND_DEFAULTS)


def test_growth_is_the_alerts_test_at_the_end() -> None:
    """The rule's near misses: a rise inside the band, no traffic in a window, no readings."""
    settings = rules.settings({})
    end = 10_000.0
    traffic = [(t, 1.0) for t in range(0, 10_001, 60)]

    def climbing(mib_per_minute: float) -> list[promapi.Point]:
        return [(t, 1000 * MIB + mib_per_minute * MIB * t / 60) for t in range(0, 10_001, 60)]

    assert growth.judge(climbing(3), traffic, end, settings).state == "growing"
    assert growth.judge(climbing(2), traffic, end, settings).state == "bounded"  # 60 MiB
    assert growth.judge(climbing(-5), traffic, end, settings).reason == (
        "its lowest reading of the last 30m is 445.0 MiB below its highest from 90m to 60m ago "
        "(noise band 64.0 MiB)"
    )
    idle = [(t, 0.0 if t > end - 1800 else 1.0) for t, _ in traffic]
    quiet = growth.judge(climbing(3), idle, end, settings)
    assert (quiet.state, quiet.reason) == ("not judged", "no requests served in the last 30m")
    fresh = growth.judge(climbing(3)[-20:], traffic, end, settings)
    assert (fresh.state, fresh.reason) == ("not judged", "no memory readings in 90m to 60m ago")
    wider = rules.settings({"growth_band_mib": {"process": 200, "device": 256}})
    assert growth.judge(climbing(3), traffic, end, wider).state == "bounded"


@pytest.mark.parametrize("span", [300, 3600, 5400, 6 * 3600, DAY, 7 * DAY, 30 * DAY])
def test_a_window_gets_300_to_600_points(span: int) -> None:
    assert 300 <= span / promapi.step_for(span) <= 600


def test_the_inventory_names_the_monitor_and_its_growth_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n"
        "    fleet: {hosts: {lab1: {}}}\n"
        "    monitors: {hosts: {mon1: {monitor_growth_window: 10m}}}\n"
    )
    given = argparse.Namespace(inventory=str(inventory), prometheus="http://127.0.0.1:9",
                               monitor=None, timeout=5.0)  # fmt: skip
    with report_cli.prometheus(given) as (base, settings):
        assert (base, settings.growth_window) == ("http://127.0.0.1:9", "10m")
    inventory.write_text("all:\n  children:\n    fleet: {hosts: {lab1: {}}}\n")
    assert cli.main(["report", "-i", str(inventory)]) == 2
    assert capsys.readouterr().err == (
        "acceldeploy report: error: no host in the monitors group: add one "
        "(docs/operations/monitoring.md)\n"
    )


def test_up_draws_each_service_in_a_lane_of_its_own() -> None:
    """Two services up at once: neither line lies on the other. lab2 starts later and is down
    for a while; its drop and its shaded span stay in its own lane."""
    window = report.Window(END - 600, END)
    step = window.step
    start = int(window.start)
    up1 = [(float(t), 1.0) for t in range(start, int(END) + 1, step)]
    up2 = [(float(t), 0.0 if 400 <= t - start < 460 else 1.0)
           for t in range(start + 120, int(END) + 1, step)]  # fmt: skip
    series: dict[str, dict[report.Key, list[promapi.Point]]] = {f.key: {} for f in report.FIGURES}
    series["up"] = {("lab1", "qwen3-vl"): up1, ("lab2", "qwen3-8b"): up2}
    found = report.Report("http://127.0.0.1:9090", window, series, {}, rules.settings({}))
    fig = report.figure_for(found, report.BY_KEY["up"])
    ax = fig.axes[0]
    spans = []
    for line in ax.get_lines():
        ys = [float(y) for y in line.get_ydata() if not math.isnan(float(y))]
        spans.append((min(ys), max(ys)))
    (lab2, lab1) = sorted(spans)
    assert lab2[1] < lab1[0]  # lanes apart: lab1 above, never crossing lab2
    assert lab1[0] == lab1[1] and lab2[0] < lab2[1]  # lab1 flat, lab2 drops while down
    ticks = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True)}
    for name, lane in (("lab1/qwen3-vl", lab1), ("lab2/qwen3-8b", lab2)):
        assert lane[1] - report.LANE_HEIGHT < ticks[name] < lane[1]  # each lane named
    bottom, top = ax.get_ylim()
    assert bottom < lab2[0] and lab1[1] < top
    (shade,) = ax.collections
    assert shade.get_label() == "lab2/qwen3-8b down"
    assert shade.get_paths()[0].get_extents().y1 <= lab2[1] + 1e-9
    fig.clf()
