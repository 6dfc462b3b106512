"""tools/tune.py's decisions: the space and SLA it accepts (and what it refuses, naming the
variable, before any restart), the planner's verdict per point, the drop-in it writes, the
pass rule and the pruning (the runs, the decision, the table and the plot: test_tune_runs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceldeploy.cli.tune import plan_point
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving.hostplan import host_plan
from acceldeploy.tune import dropin, space
from acceldeploy.tune.search import Candidate, evaluate, pruned_by

ROOT = Path(__file__).resolve().parents[2]
ASCEND = (str(ROOT / "inventory/examples/ascend-910b"), "npu-01")


def test_space_and_sla_parse():
    axes = space.parse_space("max_num_seqs=1,4 kv_cache_space_gib=1,2", "cpu")
    assert [(a.name, v) for a, v in axes] == [
        ("max_num_seqs", [1, 4]),
        ("kv_cache_space_gib", [1, 2]),
    ]
    assert space.points(axes)[:2] == [
        {"max_num_seqs": 1, "kv_cache_space_gib": 1},
        {"max_num_seqs": 1, "kv_cache_space_gib": 2},
    ]
    assert space.parse_sla("p99_ttft<=2s, p99_tpot_ms<=100") == {
        "p99_ttft": 2000.0,
        "p99_tpot": 100.0,
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("colour=1,2", "--space colour: unknown axis"),
        ("max_num_seqs=4,eight", "--space max_num_seqs: 'eight' is not a whole number"),
        ("max_num_seqs=0", "--space max_num_seqs: 0 is below 1"),
        ("", "--space is empty"),
        ("max_num_seqs", "--space 'max_num_seqs': write AXIS=V1,V2"),
        ("max_num_seqs=1,1", "--space max_num_seqs: a value is repeated"),
    ],
)
def test_bad_space_names_the_axis(text, says):
    with pytest.raises(AcceldeployError, match=None) as err:
        space.parse_space(text, "cpu")
    assert says in str(err.value)


def test_platform_axes_only_where_they_apply():
    with pytest.raises(AcceldeployError, match="kv_cache_space_gib: applies to cpu only"):
        space.parse_space("kv_cache_space_gib=1", "ascend")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("p99_ttft<=2min", "--sla p99_ttft: unknown unit 'min'"),
        ("p98_ttft<=2s", "--sla p98_ttft: unknown metric"),
        ("p99_ttft=2s", "write METRIC<=LIMIT"),
        ("", "--sla is empty"),
    ],
)
def test_bad_sla_names_the_metric(text, says):
    with pytest.raises(AcceldeployError) as err:
        space.parse_sla(text)
    assert says in str(err.value)


def test_a_point_sets_the_keys_where_its_axes_land():
    spec = {"name": "s", "extra_args": {"dtype": "bfloat16"}, "env": {"A": "1"}}
    got = space.apply(spec, {"max_num_seqs": 8, "gpu_memory_utilization": 0.8,
                             "kv_cache_space_gib": 2})  # fmt: skip
    assert got["extra_args"] == {"dtype": "bfloat16", "max-num-seqs": 8}
    assert got["gpu_memory_utilization"] == 0.8 and got["env"] == {
        "A": "1",
        "VLLM_CPU_KVCACHE_SPACE": "2",
    }
    assert spec["extra_args"] == {"dtype": "bfloat16"}  # the inventory's spec is not changed


def test_the_planner_refuses_a_point_that_cannot_start():
    hv = host_vars(*ASCEND)
    specs = hv["acceldeploy_services"]
    name = specs[0]["name"]
    fits = plan_point(hv, specs, name, {"max_num_seqs": 8})
    assert fits.reason == "" and "--max-num-seqs" in fits.unit.argv
    too_long = plan_point(hv, specs, name, {"max_model_len": 10_000_000})
    assert too_long.unit is None and "max_model_len" in too_long.reason


def test_dropin_runs_the_points_launcher_and_sets_its_env():
    hv = host_vars(*ASCEND)
    unit = host_plan(hv).units()[0]
    text = dropin.dropin_text(unit, "max_num_seqs=8")
    lines = text.splitlines()
    assert lines[1:4] == [
        "[Service]",
        "ExecStart=",
        f"ExecStart=/run/acceldeploy-tune/{unit.name}.launch",
    ]
    assert all(line.startswith("Environment=") for line in lines[4:])
    launcher = dropin.launcher_text(unit)
    assert launcher.startswith("#!/bin/bash") and "exec " in launcher


def summary(best, throughput=4.0, peak=1000.0, verdict="bounded", preemptions=0.0):
    return {
        "sla": {"best_rate": best, "tried": [], "limits_ms": {}},
        "points": [{"rate": "4", "median": {"request_throughput": throughput, "p99_ttft_ms": 100.0}}],
        "memory": {"devices": {"d": {"phases": {"ready": 900.0, "after round 2 @ 4": 950.0},
                                     "peak": peak}}},
        "metrics": {"preemptions": preemptions},
        "verdict": {"state": verdict},
    }  # fmt: skip


def test_pass_rule_sla_headroom_preemptions_verdict():
    assert evaluate(summary(4.0), 512, 4096)["passes"]
    missed = evaluate(summary(None), 512, 4096)
    assert not missed["passes"] and missed["why_not"] == ["missed the SLA at every rate tried"]
    slow = summary(None, verdict="not judged")
    slow["sla"]["limits_ms"] = {"p99_ttft": 50.0, "p99_tpot": 500.0}
    slow["points"].append({"rate": "inf", "median": {"p99_ttft_ms": 900.0}})
    assert evaluate(slow, 512, 4096)["why_not"] == [
        "missed the SLA at every rate tried (at 4 req/s: p99_ttft 100 ms > 50)"
    ]
    tight = evaluate(summary(4.0, peak=3800.0), 512, 4096)
    assert tight["why_not"] == ["peak 3800 MiB leaves less than 512 MiB of 4096"]
    assert evaluate(summary(4.0, preemptions=2), 512, 4096)["why_not"] == ["2 preemptions"]
    assert evaluate(summary(4.0, verdict="growing"), 512, 4096)["why_not"] == ["memory growing"]


def test_a_miss_at_the_lowest_rate_prunes_the_rest_of_the_inner_axis():
    rows = [{"status": "measured", "best_rate": None, "label": "x",
             "point": {"max_num_seqs": 1, "kv_cache_space_gib": 1}}]  # fmt: skip
    later = Candidate({"max_num_seqs": 1, "kv_cache_space_gib": 2})
    other = Candidate({"max_num_seqs": 4, "kv_cache_space_gib": 2})
    assert "missed the SLA at its lowest rate" in pruned_by(later, rows, "kv_cache_space_gib")
    assert pruned_by(other, rows, "kv_cache_space_gib") is None


def test_apply_changes_only_the_winners_keys_and_keeps_comments(tmp_path):
    from acceldeploy.tune import apply

    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {hosts: {lab1: {}}}\n")
    (tmp_path / "group_vars").mkdir()
    source = (ROOT / "inventory/lab/group_vars/all.yml").read_text()
    (tmp_path / "group_vars/all.yml").write_text(source)
    path = apply.defining_file(inventory, "lab1", ["ungrouped", "all"])
    assert path == tmp_path / "group_vars/all.yml"
    after = apply.apply_point(source, "qwen3-vl", {"max_num_seqs": 4, "kv_cache_space_gib": 2})
    added = [line for line in apply.diff(source, after, path).splitlines()
             if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]  # fmt: skip
    assert added == [
        "+    extra_args:",
        "+      max-num-seqs: 4",
        "+      VLLM_CPU_KVCACHE_SPACE: '2'",
    ]
    assert [line for line in source.splitlines() if line.startswith("#")] == [
        line for line in after.splitlines() if line.startswith("#")
    ]
    assert (
        apply.apply_point(after, "qwen3-vl", {"max_num_seqs": 4, "kv_cache_space_gib": 2}) == after
    )
    with pytest.raises(AcceldeployError, match="no service named other"):
        apply.apply_point(source, "other", {"max_num_seqs": 4})
