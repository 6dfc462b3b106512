"""tune's repeated runs on synthetic results: the run order, the decision against the deployed
flags (a clear winner, a tie, noise wider than the gap, a memory win), --apply's refusal, the
time estimate, --max-minutes and pruning with repeats, and the table and plot."""

from __future__ import annotations

import itertools
import json

import pytest

from acceldeploy.tune import decision, estimate, schedule, search
from acceldeploy.tune.search import Budget, Candidate

DEPLOYED = Candidate({}, deployed=True)
A = Candidate({"max_num_seqs": 1})
B = Candidate({"max_num_seqs": 8})
GRID = {A.label: A.point, B.label: B.point}


def test_runs_interleave_the_deployed_flags_first_no_point_twice_in_a_row():
    plan = schedule.order(["d", "a", "b"], 3)
    assert plan == [("d", 1), ("a", 1), ("b", 1), ("d", 2), ("b", 2), ("a", 2),
                    ("d", 3), ("a", 3), ("b", 3)]  # fmt: skip
    assert all(x[0] != y[0] for x, y in itertools.pairwise(plan))
    assert schedule.describe(["d", "a", "b"], 3) == (
        "cycle 1: d, a, b; cycle 2: d, b, a; and so on, alternating"
    )


def run(throughput, peak=1000.0, passes=True, missed=False, ttft=100.0):
    """One run's record as evaluate() leaves it."""
    return {"status": "measured", "best_rate": None if missed else 4.0,
            "throughput": None if missed else throughput, "p99_ttft_ms": None if missed else ttft,
            "peak_mib": peak, "ready_seconds": 30.0, "passes": passes and not missed,
            "why_not": ["missed the SLA at every rate tried"] if missed else
            ([] if passes else ["2 preemptions"])}  # fmt: skip


def decide(deployed, others, peaks=None):
    """Rows and winner from per-cycle throughputs: deployed [x per cycle], others {label: [...]}"""
    runs = []
    for cycle, value in enumerate(deployed, 1):
        runs.append({**run(value), **DEPLOYED.describe(), "cycle": cycle})
    grid = [Candidate(GRID[name]) for name in others]
    for candidate, values in zip(grid, others.values(), strict=True):
        for cycle, value in enumerate(values, 1):
            peak = (peaks or {}).get(candidate.label, [1000.0] * len(values))[cycle - 1]
            runs.append({**run(value, peak), **candidate.describe(), "cycle": cycle})
    points = [DEPLOYED.describe(), *(c.describe() for c in grid)]
    rows = decision.rows(points, runs, {})
    return rows, decision.winner(rows)


def test_a_clear_winner_beats_the_deployed_flags_with_its_interval():
    # cycle 2 ran under another job's load: both sides of that cycle are slower
    rows, best = decide([9.8, 6.1, 10.2], {A.label: [8.7, 5.9, 9.1], B.label: [24.4, 15.4, 25.0]})
    assert best is not None and best["label"] == "max_num_seqs=8"
    assert best["beats"] == "throughput" and best["gain_sla_throughput"]["low"] > 5
    assert rows[1]["beats"] is None  # A is slower: not a winner
    from acceldeploy.tune.report import decision_line

    assert decision_line(best).startswith("winner: max_num_seqs=8: beats the deployed flags by +")


def test_a_tie_a_a_has_no_winner_and_says_so():
    rows, best = decide([15.4, 24.4, 19.0], {A.label: [15.9, 23.8, 19.3]})
    assert best is None and rows[1]["beats"] is None
    from acceldeploy.tune.report import decision_line

    assert decision_line(best) == "winner: none: no point beats the deployed flags beyond the noise"


def test_noise_wider_than_the_gap_is_no_winner():
    _, best = decide([10.0, 10.0, 10.0], {A.label: [9.0, 16.0, 11.0]})
    assert best is None


def test_less_memory_at_equal_throughput_wins_on_memory():
    _rows, best = decide([10.0, 12.0, 11.0], {A.label: [10.2, 11.8, 11.1]},
                        peaks={A.label: [700.0, 705.0, 698.0]})  # fmt: skip
    assert best is not None and best["beats"] == "memory"
    assert best["gain_peak_mib"]["high"] < 0


def test_a_point_failing_a_run_cannot_win_and_says_which_run():
    runs = [{**run(10.0), **DEPLOYED.describe(), "cycle": c} for c in (1, 2, 3)]
    runs += [{**run(30.0), **B.describe(), "cycle": 1},
             {**run(30.0, passes=False), **B.describe(), "cycle": 2}]  # fmt: skip
    rows = decision.rows([DEPLOYED.describe(), B.describe()], runs, {})
    assert rows[1]["passes"] is False and rows[1]["why_not"] == ["run 2: 2 preemptions"]
    assert decision.winner(rows) is None


def test_the_deployed_flags_missing_the_sla_count_zero_at_the_sla():
    assert decision.sla_throughput(run(5.0, missed=True)) == 0.0
    assert decision.sla_throughput({"status": "failed to start"}) is None
    _, best = decide([0.0, 0.0, 0.0], {B.label: [3.0, 3.2, 2.9]})
    assert best is not None and best["label"] == B.label


def test_apply_refuses_without_a_winner_and_says_why(tmp_path, capsys):
    from acceldeploy.cli.tune import apply_winner

    path = tmp_path / "all.yml"
    path.write_text("acceldeploy_services:\n  - name: s\n")
    apply_winner(path, "s", None, 3, "acceldeploy tune")
    assert path.read_text() == "acceldeploy_services:\n  - name: s\n"
    err = capsys.readouterr().err
    assert "--apply refused: no point beats the deployed flags beyond the noise" in err
    assert "90% Student-t interval of the mean of the gain over 3 paired runs" in err
    best = {"label": "max_num_seqs=8", "point": {"max_num_seqs": 8}}
    apply_winner(path, "s", best, 3, "acceldeploy tune")
    assert "max-num-seqs: 8" in path.read_text()


def test_the_estimate():
    assert estimate.per_run([]) is None and estimate.per_run([60.0, 120.0]) == 90.0
    assert estimate.fits(0.0, None, 1.0) and estimate.fits(30.0, 30.0, 1.0)
    assert not estimate.fits(31.0, 30.0, 1.0)
    assert [estimate.duration(s) for s in (45, 840, 7500)] == ["45 s", "14 min", "2 h 05 min"]


def test_the_estimate_before_the_start_comes_from_an_earlier_tune(tmp_path):
    settings = {"host": "lab1", "service": "s", "profile": {"name": "p"}}
    old = tmp_path / "20260101-000000-s"
    old.mkdir()
    (old / "tune.json").write_text(json.dumps({"settings": settings, "runs": [
        {"seconds": 100.0}, {"seconds": 140.0}]}))  # fmt: skip
    other = tmp_path / "20260102-000000-s"
    other.mkdir()
    (other / "tune.json").write_text(json.dumps({"settings": {**settings, "service": "t"},
                                                 "runs": [{"seconds": 5.0}]}))  # fmt: skip
    assert estimate.earlier(tmp_path, settings) == ([100.0, 140.0], old)
    text = search.plan_text([DEPLOYED, A, B], {}, Budget(3, 60.0, [100.0, 140.0], old), [])
    assert text.splitlines() == [
        "plan: 3 points (the deployed flags first) x 3 runs = 9 runs, interleaved (cycle 1: "
        "deployed flags, max_num_seqs=1, max_num_seqs=8; cycle 2: deployed flags, "
        "max_num_seqs=8, max_num_seqs=1; and so on, alternating)",
        f"estimate: 18 min (9 runs at ~2 min, from the runs of {old})",
    ]
    tight = search.plan_text([DEPLOYED, A, B], {}, Budget(3, 10.0, [120.0], old), [])
    assert "over --max-minutes 10: the search stops there" in tight
    assert search.plan_text([DEPLOYED, A], {}, Budget(2, 10.0), []).endswith(
        "estimate: after the first run (no earlier tune of this service and profile)"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    found = Clock()
    monkeypatch.setattr(search.time, "monotonic", found)
    return found


def searched(tmp_path, clock, figures, runs=3, max_minutes=60.0, state=None, grid=(A, B)):
    """search() with a measure that takes 60 s a run and reads `figures`: label -> per cycle."""
    measured: list[tuple[str, int]] = []

    def measure(candidate: Candidate, cycle: int) -> dict:
        clock.now += 60.0
        measured.append((candidate.label, cycle))
        return figures[candidate.label][cycle - 1]

    lines: list[str] = []
    state = state or {"settings": {}, "runs": [], "skipped": {}, "points": []}
    search.search([DEPLOYED, *grid], state, tmp_path, measure,
                  Budget(runs, max_minutes), lines.append)  # fmt: skip
    return state, measured, lines


def test_search_measures_every_point_every_cycle_and_shows_progress(tmp_path, clock):
    figures = {DEPLOYED.label: [run(10.0)] * 3, A.label: [run(9.0)] * 3,
               B.label: [run(20.0), run(21.0), run(19.5)]}  # fmt: skip
    state, measured, lines = searched(tmp_path, clock, figures)
    assert measured == [(label, c) for label, c in schedule.order(
        [DEPLOYED.label, A.label, B.label], 3)]  # fmt: skip
    assert "estimate: after the first run" in lines[0]
    assert (
        "[1/9 runs, 0/3 points done, ~8 min left] deployed flags: run 1/3: measured (10 req/s "
        "at the SLA)" in lines
    )
    assert lines[-1].startswith("[9/9 runs, 3/3 points done, ~0 s left] max_num_seqs=8: run 3/3")
    assert decision.winner(state["points"])["label"] == B.label
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert [r["runs"] for r in saved["points"]] == [3, 3, 3]
    # --resume: nothing left to run, nothing run again
    _again, measured, lines = searched(tmp_path, clock, figures, state=saved)
    assert measured == [] and "max_num_seqs=8: run 3 measured (from the earlier run)" in lines


def test_max_minutes_counts_the_repeats(tmp_path, clock):
    figures = {label: [run(10.0)] * 3 for label in (DEPLOYED.label, A.label, B.label)}
    state, measured, _lines = searched(tmp_path, clock, figures, max_minutes=5.0)
    assert len(measured) == 5  # a sixth 60 s run would end past 5 min
    assert state["stopped"] == "over --max-minutes 5 before max_num_seqs=1 run 2"
    assert [r["runs"] for r in state["points"]] == [2, 1, 2]


def test_a_point_that_misses_is_not_run_again_and_prunes_the_inner_axis(tmp_path, clock):
    c = Candidate({"max_num_seqs": 16})
    figures = {DEPLOYED.label: [run(10.0)] * 3, A.label: [run(0, missed=True)] * 3,
               B.label: [run(20.0)] * 3, c.label: [run(30.0)] * 3}  # fmt: skip
    state, measured, _lines = searched(tmp_path, clock, figures, grid=(A, B, c))
    assert [m for m in measured if m[0] == A.label] == [(A.label, 1)]
    assert state["skipped"][B.label]["status"] == "pruned"
    assert state["skipped"][c.label]["status"] == "pruned"
    rows = {r["label"]: r for r in state["points"]}
    assert rows[A.label]["why_not"] == ["run 1: missed the SLA at every rate tried"]
    assert decision.winner(state["points"]) is None


def test_the_table_and_the_plot_show_intervals_and_the_deployed_point(tmp_path):
    from PIL import Image
    from rich.console import Console

    from acceldeploy.tune import report

    rows, best = decide([9.8, 6.1, 10.2], {A.label: [8.7, 5.9, 9.1], B.label: [24.4, 15.4, 25.0]},
                        peaks={B.label: [2457.3, 2460.0, 2470.2]})  # fmt: skip
    console = Console(width=100, record=True)
    report.print_table(console, rows, "tune lab1/qwen3-vl", 3)
    text = console.export_text()
    assert "deployed flags" in text and "(baseline)" in text
    assert "24.4 [12.5, 30.7]" in text and "+14.6 [+7.64, +18.2]" in text
    assert "2,460 [2,451, 2,474]" in text
    assert "90% Student-t interval of the mean" in text
    # split to fit 100 columns, each part beginning with the points; the decision in the first
    assert max(len(line) for line in text.splitlines()) <= 100
    assert text.count("| point ") >= 2
    first = text[: text.index("| point", text.index("| point") + 1)]
    assert "beats deployed" in first and "throughput" in first
    missed = {**A.describe(), "runs": 1, "status": "measured", "p99_ttft_ms": None,
              "lowest": {"rate": "1", "throughput": 0.45, "p99_ttft_ms": 8070.0}}  # fmt: skip
    report.plot_pareto([*rows, missed], best, 1500.0, tmp_path / "pareto.png",
                       where="lab1/qwen3-vl", sla="p99_ttft <= 1,500 ms")  # fmt: skip
    report.plot_pareto(rows[:1], None, None, tmp_path / "alone.png")
    for name in ("pareto.png", "alone.png"):
        with Image.open(tmp_path / name) as image:
            assert image.format == "PNG" and image.width >= 600


def pareto(rows, best, sla_ttft):
    """The Pareto figure of synthetic rows, its axes and its labels' boxes (pixels)."""
    from matplotlib.text import Annotation, Text

    from acceldeploy.tune import report

    fig = report.pareto_figure(rows, best, sla_ttft, "lab1/qwen3-vl", "p99_ttft <= 60,000 ms")
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if isinstance(t, Annotation)]
    boxes = {t.get_text(): Text.get_window_extent(t, renderer) for t in labels}
    return fig, ax, boxes


def rows_of(ttfts, throughputs=(2.96, 9.34, 9.1, 9.2)):
    """A deployed point and three close ones, each interval +-10 %, max_num_seqs=8 the winner."""
    names = ["deployed flags", "max_num_seqs=8", "max_num_seqs=4", "max_num_seqs=6"]
    rows = []
    for name, ttft, rate in zip(names, ttfts, throughputs, strict=True):
        rows.append({"label": name, "runs": 3, "status": "measured",
                     "deployed": name == "deployed flags", "beats": None,
                     "sla_throughput": {"n": 3, "median": rate, "mean": rate,
                                        "low": rate * 0.95, "high": rate * 1.05},
                     "p99_ttft_ms": {"n": 3, "median": ttft, "mean": ttft,
                                     "low": ttft * 0.9, "high": ttft * 1.1},
                     "peak_mib": {"n": 3, "median": 2556.0, "mean": 2556.0,
                                  "low": 2550.0, "high": 2560.0},
                     "gain_sla_throughput": {"n": 3, "median": 6.37, "mean": 6.37,
                                             "low": 6.05, "high": 6.85}})  # fmt: skip
    rows[1]["beats"] = "throughput"
    return rows, rows[1]


def test_the_pareto_plot_fits_its_points_and_notes_an_sla_far_above():
    """The 2026-11-26 decision's shape: points at 141 to 2,400 ms, the SLA at 60 s."""
    rows, best = rows_of([2400.0, 141.0, 150.0, 145.0])
    fig, ax, _ = pareto(rows, best, 60000.0)
    bottom, top = ax.get_ylim()
    assert bottom <= 141.0 * 0.9 and 2400.0 * 1.1 <= top < 60000.0  # the points set the scale
    assert not [line for line in ax.get_lines() if 60000.0 in line.get_ydata()]
    (note,) = [t.get_text() for t in ax.texts if "SLA" in t.get_text()]
    assert "60,000 ms" in note and "above" in note
    title = ax.get_title()
    assert "lab1/qwen3-vl" in title and "most req/s" in title and "least peak memory" in title
    assert "winner: max_num_seqs=8" in title
    fig.clf()


def test_an_sla_near_the_points_is_a_line_in_view():
    rows, best = rows_of([900.0, 400.0, 420.0, 410.0])
    fig, ax, _ = pareto(rows, best, 1500.0)
    assert ax.get_ylim()[1] >= 1500.0 and ax.get_yscale() == "linear"
    assert [line for line in ax.get_lines() if list(line.get_ydata()) == [1500.0, 1500.0]]
    fig.clf()


def test_the_pareto_labels_do_not_overlap_and_stay_inside():
    """Three points within 3 % of each other: each label finds its own place."""
    rows, best = rows_of([2400.0, 141.0, 150.0, 145.0])
    fig, ax, boxes = pareto(rows, best, 60000.0)
    assert set(boxes) == {row["label"] for row in rows}
    inside = ax.get_window_extent(fig.canvas.get_renderer())
    for name, box in boxes.items():
        assert inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1), name
    for (a, one), (b, other) in itertools.combinations(boxes.items(), 2):
        assert not one.overlaps(other), (a, b)
    fig.clf()
