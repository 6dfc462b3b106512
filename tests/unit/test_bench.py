"""tools/bench.py's parts that decide: profiles and their errors, the SLA search, the leak
verdict, metrics parsing (on a recorded real vLLM 0.12 /metrics), the images dataset,
baselines and outliers. The lab test (tests/lab/test_site_bench.py) runs it for real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acceldeploy.bench import baseline, dataset, profiles, series, verdict
from acceldeploy.bench.series import Sample
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.bench import driver

DATA = Path(__file__).parents[1] / "data" / "recorded"


def test_builtin_profiles_parse():
    known = profiles.profiles(None)
    assert {"smoke", "image_reuse", "random-mm", "visionarena"} <= set(known)
    assert known["smoke"].rounds == 3 and known["smoke"].dataset == "images"
    assert known["visionarena"].request_rate == 20.0


def test_inventory_overrides_a_field_and_adds_profiles(tmp_path):
    share = tmp_path / "chats.json"
    share.write_text("[]")
    found = profiles.profiles(
        {"smoke": {"prompts": 8}, "mine": {"dataset": "sharegpt", "dataset_path": "chats.json",
                                           "prompts": 5}},
        base=tmp_path,
    )  # fmt: skip
    assert found["smoke"].prompts == 8 and found["smoke"].rounds == 3
    assert found["mine"].dataset_path == str(share)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("nope", None, "unknown bench profile 'nope'"),
        ("x", {"dataset": "sharegpt", "dataset_path": "/no/such.json", "prompts": 3},
         "acceldeploy_bench_profiles.x.dataset_path: /no/such.json does not exist"),
        ("x", {"dataset": "images", "prompts": 3, "request_rate": 0},
         "acceldeploy_bench_profiles.x.request_rate must be > 0"),
        ("x", {"dataset": "images", "prompts": 3, "request_rate": -2},
         "acceldeploy_bench_profiles.x.request_rate must be > 0"),
        ("x", {"dataset": "images", "prompts": 3, "sla": {"p99_ttft": "3min"}},
         "acceldeploy_bench_profiles.x.sla.p99_ttft: unknown unit 'min'"),
        ("x", {"dataset": "images", "prompts": 3, "sla": {"p98_ttft": "3s"}},
         "acceldeploy_bench_profiles.x.sla: unknown metric 'p98_ttft'"),
        ("x", {"dataset": "images", "prompts": 3, "image_reuse": 1.5},
         "acceldeploy_bench_profiles.x.image_reuse must be <= 1"),
        ("x", {"dataset": "images", "prompts": 3, "image_reuse": -0.1},
         "acceldeploy_bench_profiles.x.image_reuse must be >= 0"),
        ("x", {"dataset": "images", "prompts": 3, "image_reuse": 1},
         "image_reuse must be between 0 and 1"),
        ("x", {"dataset": "random-mm", "prompts": 3, "input_len": 8, "image_reuse": 0.5},
         "image_reuse applies to dataset: images only"),
        ("x", {"dataset": "tweets", "prompts": 3}, "acceldeploy_bench_profiles.x.dataset must be"),
        ("x", {"dataset": "images"}, "acceldeploy_bench_profiles.x.prompts is required"),
        ("x", {"dataset": "images", "prompts": 3, "sweep": True},
         "acceldeploy_bench_profiles.x.sweep needs acceldeploy_bench_profiles.x.sla"),
        ("x", {"dataset": "images", "prompts": 3, "colour": "red"},
         "acceldeploy_bench_profiles.x.colour: unknown field"),
        ("x", {"dataset": "images", "prompts": 3, "ignore_eos": "yes"},
         "acceldeploy_bench_profiles.x.ignore_eos must be true or false, got 'yes'"),
        ("x", {"dataset": "conversations", "prompts": 3, "input_len": 8},
         "acceldeploy_bench_profiles.x.turns is required for dataset conversations"),
        ("x", {"dataset": "conversations", "prompts": 3, "input_len": 8, "turns": 2,
               "request_rate": 4}, "acceldeploy_bench_profiles.x.request_rate does not apply"),
        ("x", {"dataset": "conversations", "prompts": 3, "turns": 2},
         "acceldeploy_bench_profiles.x.input_len is required for dataset conversations"),
        ("x", {"dataset": "images", "prompts": 3, "turns": 2},
         "acceldeploy_bench_profiles.x.turns applies to dataset: conversations only"),
    ],
)  # fmt: skip
def test_bad_profiles_name_the_variable(name, value, says):
    with pytest.raises(AcceldeployError) as err:
        profiles.pick(None if value is None else {name: value}, name)
    assert says in str(err.value)


def test_ignore_eos_reaches_vllm_bench_serve():
    profile = profiles.pick({"x": {"dataset": "random", "prompts": 2, "input_len": 8,
                                   "ignore_eos": True}}, "x")  # fmt: skip
    plan = {"profile": profile.to_dict(), "base_url": "http://127.0.0.1:8000",
            "served_model_name": "m", "tokenizer": "/models/m", "label": "h-m"}  # fmt: skip
    argv = driver.bench_argv(plan, driver.INF, Path("/tmp/r"), 1)
    assert "--ignore-eos" in argv and "--random-output-len" in argv
    plan["profile"] = {**plan["profile"], "ignore_eos": False}
    assert "--ignore-eos" not in driver.bench_argv(plan, driver.INF, Path("/tmp/r"), 1)


def test_durations():
    assert profiles.duration_ms("500ms", "w") == 500.0
    assert profiles.duration_ms("2s", "w") == 2000.0
    assert profiles.duration_ms(250, "w") == 250.0


def capacity(limit: float):
    calls = []

    def run(rate: float) -> bool:
        calls.append(rate)
        return rate <= limit

    return run, calls


def test_sla_search_doubles_then_bisects():
    run, calls = capacity(5.3)
    best, tried = driver.sla_search(run, 1.0, 64.0, 3)
    assert calls[:5] == [driver.INF, 1.0, 2.0, 4.0, 8.0]
    assert best is not None and 4.0 <= best <= 5.3
    assert len(tried) == 5 + 3 and all(met == (rate <= 5.3) for rate, met in tried)


def test_sla_search_unlimited_rate_that_meets_is_the_answer_and_none_when_nothing_meets():
    assert driver.sla_search(capacity(driver.INF)[0], 1.0, 64.0, 3)[0] == driver.INF
    assert driver.sla_search(capacity(0.5)[0], 1.0, 64.0, 3)[0] is None


def test_sla_met_reads_vllm_result_keys():
    result = {"completed": 10, "failed": 0, "p99_ttft_ms": 900.0, "p99_tpot_ms": 40.0}
    assert driver.sla_met(result, {"p99_ttft": 1000.0, "p99_tpot": 50.0})
    assert not driver.sla_met(result, {"p99_ttft": 800.0})
    assert not driver.sla_met({**result, "failed": 1}, {"p99_ttft": 1000.0})


def test_metrics_parsed_from_a_recorded_vllm_exposition():
    found = driver.parse_metrics((DATA / "vllm-0.12.0-cpu-metrics.txt").read_text())
    assert set(found) >= {"kv_cache_usage", "running", "waiting", "preemptions",
                          "prefix_cache_queries", "mm_cache_queries", "mm_cache_hits"}  # fmt: skip
    assert 0.0 <= found["kv_cache_usage"] <= 1.0
    assert found["mm_cache_queries"] == 97.0 and found["mm_cache_hits"] == 66.0


def samples(readings: dict[str, list[float]]) -> list[Sample]:
    out, t = [], 0.0
    for phase, values in readings.items():
        for value in values:
            out.append(Sample(t, phase, {"dev": value}, {}))
            t += 0.5
    return out


AFTER = ["after round 1 @ inf", "after round 2 @ inf", "after round 3 @ inf"]


def test_a_plateau_after_round_one_is_bounded():
    found = verdict.judge(
        samples({"ready": [1000, 1001, 999], "round 1 @ inf": [1300], AFTER[0]: [1200, 1201],
                 "round 2 @ inf": [1310], AFTER[1]: [1205], "round 3 @ inf": [1300],
                 AFTER[2]: [1203]}),
        "dev", "cpu", AFTER,
    )  # fmt: skip
    assert found.state == "bounded" and found.plateau_mib == 1200.5


def test_growth_over_identical_rounds_is_growing_with_mib_per_round():
    found = verdict.judge(
        samples({"ready": [1000, 1001], AFTER[0]: [1200], AFTER[1]: [1300], AFTER[2]: [1400]}),
        "dev", "cpu", AFTER,
    )  # fmt: skip
    assert found.state == "growing" and found.per_round_mib == 100.0
    assert "dev grew 200 MiB" in found.reason


def test_noisy_idle_widens_the_band():
    noisy = samples({"ready": [1000, 1100], AFTER[0]: [1200], AFTER[1]: [1300], AFTER[2]: [1400]})
    assert verdict.judge(noisy, "dev", "cpu", AFTER).state == "bounded"  # band 400 MiB


def test_one_round_is_not_judged():
    found = verdict.judge(samples({"ready": [1], AFTER[0]: [2]}), "dev", "cpu", AFTER[:1])
    assert found.state == "not judged"


def test_images_dataset_reuses_the_share_asked_and_images_differ(tmp_path):
    profile = profiles.pick({"r": {"dataset": "images", "prompts": 10, "image_reuse": 0.5}}, "r")
    assert dataset.image_plan(profile) == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    images, template = dataset.write(profile, tmp_path)
    files = sorted(images.iterdir())
    assert len(files) == 5 and len({f.read_bytes() for f in files}) == 5
    entries = json.loads(template.read_text())
    assert len(entries) == 10 and entries[5]["image"] == "{IMAGES}/img-0000.png"
    none = profiles.pick(None, "smoke")
    assert len(set(dataset.image_plan(none))) == none.prompts


def service(host: str, rps: list[float], ttft: list[float], key: dict | None = None) -> dict:
    values = {"request_throughput": rps, "p99_ttft_ms": ttft}
    return {
        "host": host,
        "service": "qwen3-vl",
        "key": key or {"argv_sha256": "a", "profile": "smoke"},
        "points": [{
            "rate": "inf",
            "runs": [dict(zip(values, r, strict=True)) for r in zip(*values.values(), strict=True)],
            "median": {k: sorted(v)[len(v) // 2] for k, v in values.items()},
            "spread": {k: verdict.spread(v) for k, v in values.items()},
        }],
        "memory": {"devices": {"d": {"phases": {"ready": 100.0, "after round 3 @ inf": 150.0}}}},
    }  # fmt: skip


def test_baseline_like_with_like():
    healthy = {"services": [service("lab1", [4.0, 4.1, 3.9], [200, 210, 190])]}
    same = baseline.compare(healthy, healthy, 0.1)
    assert {c["state"] for c in same} == {"within noise"} and baseline.regressions(same) == []
    slow = {"services": [service("lab1", [1.0, 1.1, 0.9], [900, 950, 910])]}
    found = baseline.regressions(baseline.compare(slow, healthy, 0.1))
    assert {r["figure"] for r in found} == {"request_throughput", "p99_ttft_ms"}
    (rps,) = [r for r in found if r["figure"] == "request_throughput"]
    assert rps["text"] == (
        "lab1/qwen3-vl: request_throughput 4 [3.83, 4.17] -> 1 [0.831, 1.17]: regressed "
        "(tolerance 0.4)"
    )
    better = baseline.compare(healthy, slow, 0.1)
    assert {c["figure"]: c["state"] for c in better}["request_throughput"] == "improved"
    baseline.check_keys(healthy, {("lab1", "qwen3-vl"): {"argv_sha256": "a", "profile": "smoke"}})
    baseline.check_keys(healthy, {("lab9", "qwen3-vl"): {"argv_sha256": "b"}})  # not in it
    with pytest.raises(AcceldeployError, match="argv_sha256: 'a' -> 'b'"):
        baseline.check_keys(
            healthy, {("lab1", "qwen3-vl"): {"argv_sha256": "b", "profile": "smoke"}}
        )


def test_a_change_inside_the_rounds_noise_or_the_tolerance_is_within_noise():
    then = {"services": [service("lab1", [4.0, 5.0, 3.0], [200, 210, 190])]}
    noisy = {"services": [service("lab1", [3.0, 4.2, 2.4], [200, 210, 190])]}  # gap < noise
    small = {"services": [service("lab1", [3.6, 3.62, 3.64], [200, 210, 190])]}  # apart, < 10%
    tight = {"services": [service("lab1", [3.9, 4.0, 4.1], [200, 210, 190])]}
    for now, old in ((noisy, then), (small, tight)):
        states = {c["figure"]: c["state"] for c in baseline.compare(now, old, 0.1)}
        assert states["request_throughput"] == "within noise"
    apart = {c["figure"]: c["state"] for c in baseline.compare(small, tight, 0.01)}
    assert apart["request_throughput"] == "regressed"


def test_kept_memory_beyond_the_floor_regresses():
    then = {"services": [service("lab1", [4.0], [1])]}
    now = {"services": [service("lab1", [4.0], [1])]}
    now["services"][0]["memory"]["devices"]["d"]["phases"]["after round 3 @ inf"] = 400.0
    (kept,) = [c for c in baseline.compare(now, then, 0.1) if c["figure"].startswith("kept")]
    assert kept["state"] == "regressed" and kept["baseline"] == 50.0 and kept["now"] == 300.0


def test_another_argv_is_named_flag_by_flag():
    then = {"argv": ["vllm", "serve", "m", "--max-num-seqs", "4", "--enforce-eager"]}
    now = {"argv": ["vllm", "serve", "m", "--max-num-seqs", "1", "--middleware", "x.y"]}
    (diff,) = baseline.key_difference(now, then)
    assert diff == (
        "argv: --enforce-eager -> (unset), --max-num-seqs 4 -> 1, --middleware (unset) -> x.y"
    )


def test_where_a_service_listens_is_not_part_of_its_key():
    from acceldeploy.bench.runner import without_address

    argv = ["vllm", "serve", "m", "--host", "127.0.0.1", "--port=8001", "--max-num-seqs", "4"]
    assert without_address(argv) == ["vllm", "serve", "m", "--max-num-seqs", "4"]


def test_fleet_outlier_is_the_slow_host():
    run = {"services": [service("lab1", [4.0], [1]), service("lab2", [4.2], [1]),
                        service("lab3", [2.0], [1])]}  # fmt: skip
    assert [o["host"] for o in baseline.outliers(run)] == ["lab3"]


def test_device_memory_from_recorded_smi_output():
    npu = (DATA / "npu-smi-info-910b2-x8.txt").read_text()
    found = series.device_memory("ascend", [2, 3], {"raw": npu})
    assert set(found) == {"npu2", "npu3"} and all(v > 0 for v in found.values())
    hl = (DATA / "hl-smi-gaudi2-hl225-x8.txt").read_text()
    found = series.device_memory("gaudi", [0], {"raw": hl})
    assert set(found) == {"hpu0"}
    cpu = series.device_memory("cpu", [], {"pss_mib": 812.5, "rss_mib": 900.0})
    assert cpu == {series.CPU_DEVICE: 812.5}


def test_a_phase_begins_only_after_the_sample_under_way_is_written(tmp_path):
    """A sample reads memory (slow: a big server's smaps) and then /metrics. A round's
    requests go out right after mark() returns; none may be counted in the phase before."""
    import threading
    import time

    from metrics_endpoint import serve

    started = threading.Event()
    server = serve(lambda: f"vllm:num_requests_running {int(started.is_set())}\n".encode())
    plan = {
        "base_url": f"http://127.0.0.1:{server.server_address[1]}",
        "memory_source": "command", "memory_command": ["sh", "-c", "sleep 0.4; echo 1"],
        "sample_interval": 0.2,
    }  # fmt: skip
    sampler = driver.Sampler(plan, tmp_path / "samples.jsonl")
    sampler.start()
    time.sleep(0.3)  # inside the second sample's memory reading
    driver.mark(sampler, "round 1", 0)
    started.set()  # the round's requests
    time.sleep(1.0)
    sampler.halt.set()
    sampler.wake.set()
    sampler.join()
    server.shutdown()
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert {r["phase"] for r in rows} == {"client start", "round 1"}
    assert all(r["metrics"]["running"] == 0 for r in rows if r["phase"] == "client start"), rows
    assert rows[-1]["phase"] == "round 1" and rows[-1]["metrics"]["running"] == 1


def test_metrics_parsed_from_the_recorded_vllm_0_13_exposition():
    found = driver.parse_metrics((DATA / "vllm-0.13.0-cpu-metrics.txt").read_text())
    assert set(found) >= {"kv_cache_usage", "running", "waiting", "preemptions",
                          "prefix_cache_queries", "mm_cache_queries", "mm_cache_hits"}  # fmt: skip
    assert found["running"] == 0.0 and found["waiting"] == 0.0
