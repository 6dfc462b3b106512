"""The fleet's alert and recording rules (acceldeploy.monitor.rules) checked by Prometheus's own
promtool: `check rules` on what is rendered, and `test rules` with input series for every
alert (tests/data/monitor/rules-test.yml): each fires on its case and stays quiet on a
near miss, the memory-growth alerts on series shaped like seed 000's. The vLLM series are
named by the settings (the scraped stacks' names): other names render rules that fire on
series of those names, and the default names render today's rules byte for byte."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from acceldeploy.errors import AcceldeployError
from acceldeploy.monitor import rules

DATA = Path(__file__).parents[1] / "data" / "monitor"
promtool = pytest.mark.skipif(
    not shutil.which("promtool"), reason="no promtool (make host-deps: Debian's prometheus)"
)


# A stack that renames every series the rules read (vLLM's names in some later release).
RENAMED = {
    "running": "vllm:requests_running",
    "waiting": "vllm:requests_waiting",
    "kv_cache_usage": "vllm:kv_cache_used_ratio",
    "preemptions": "vllm:preempted_requests_total",
    "requests": "vllm:requests_finished_total",
    "generation_tokens": "vllm:output_tokens_total",
    "time_to_first_token": "vllm:first_token_latency_seconds",
    "prefix_cache_queries": "vllm:prefix_cache_lookups_total",
    "prefix_cache_hits": "vllm:prefix_cache_found_total",
}


def written(tmp_path: Path, **raw: object) -> Path:
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules.document(rules.settings(raw)), sort_keys=False))
    return path


def promtool_passes(tmp_path: Path) -> None:
    """promtool checks rules.yml and runs rules-test.yml against it."""
    check = subprocess.run(["promtool", "check", "rules", "rules.yml"], cwd=tmp_path,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run(["promtool", "test", "rules", "rules-test.yml"], cwd=tmp_path,
                          capture_output=True, text=True)  # fmt: skip
    assert test.returncode == 0, test.stdout + test.stderr


@promtool
def test_every_alert_fires_on_its_case_and_not_on_a_near_miss(tmp_path: Path) -> None:
    written(tmp_path, ttft_slo={"qwen3-vl": "2s"})
    shutil.copy(DATA / "rules-test.yml", tmp_path)
    promtool_passes(tmp_path)


def test_the_default_names_render_todays_rules_byte_for_byte() -> None:
    """A regression check: the rules rendered before their vLLM series came from the stacks
    (tests/data/monitor/rules-default.yml), for every default stack's names."""
    from acceldeploy.planner.stacks import load_stacks, metric_names

    recorded = (DATA / "rules-default.yml").read_text()
    for entry in load_stacks().values():
        names = {role: metric_names(entry)[role] for role in rules.SERIES_ROLES}
        raw = {"ttft_slo": {"qwen3-vl": "2s"}, "metrics": names}
        assert yaml.safe_dump(rules.document(rules.settings(raw)), sort_keys=False) == recorded
    assert rules.settings({}).metrics == rules.DEFAULT_SERIES


@promtool
def test_a_stacks_names_flow_into_rules_that_fire_on_its_series(tmp_path: Path) -> None:
    """Every alert's test again, its input series renamed as the stack renames them: the same
    alerts fire, and no default name is left in the rules."""
    path = written(tmp_path, ttft_slo={"qwen3-vl": "2s"}, metrics=RENAMED)
    text = path.read_text()
    for role, name in RENAMED.items():
        assert rules.DEFAULT_SERIES[role] not in text, role
        assert name in text or role == "running", role  # running: the figures' only
    case = (DATA / "rules-test.yml").read_text()
    for role, name in RENAMED.items():
        case = case.replace(rules.DEFAULT_SERIES[role], name)
    (tmp_path / "rules-test.yml").write_text(case)
    promtool_passes(tmp_path)


@promtool
def test_a_shorter_for_fires_sooner(tmp_path: Path) -> None:
    """The lab's tests shorten `for:` by a variable: the same down series fires at 1m then."""
    written(tmp_path, alert_for={"down": "15s"})
    case = {"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [{"series": 'up{job="vllm",host="lab1",service="s"}',
                          "values": "1 0 0 0 0"}],
        "alert_rule_test": [{"eval_time": "45s", "alertname": "VllmServiceDown", "exp_alerts": [{
            "exp_labels": {"severity": "critical", "job": "vllm", "host": "lab1", "service": "s"},
            "exp_annotations": {
                "summary": "s on lab1 does not answer /metrics",
                "runbook": "acceldeploy verify -i <inventory> --limit lab1; on the host, "
                           "systemctl status s"}}]}]}]}  # fmt: skip
    (tmp_path / "t.yml").write_text(yaml.safe_dump(case))
    test = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path,
                          capture_output=True, text=True)  # fmt: skip
    assert test.returncode == 0, test.stdout + test.stderr


@pytest.mark.parametrize(
    ("raw", "says"),
    [({"alert_for": {"down": "soon"}}, "monitor_alert_for.down: 'soon' is not a duration"),
     ({"alert_for": {"melted": "1m"}}, "monitor_alert_for.melted: no such alert"),
     ({"kv_cache_high": 1.5}, "monitor_kv_cache_high must be a share in (0, 1]"),
     ({"prefix_cache_drop": 1}, "monitor_prefix_cache_drop must be a share in (0, 1)"),
     ({"growth_band_mib": {"process": 0}}, "monitor_growth_band_mib must give process and device"),
     ({"ttft_slo": {"qwen3-vl": "2"}}, "monitor_ttft_slo.qwen3-vl: '2' is not a duration"),
     ({"growth_window": "1 hour"}, "monitor_growth_window: '1 hour' is not a duration"),
     ({"metrics": {"latency": "x"}}, "the monitor's vLLM series: no role latency; known: running"),
     ({"metrics": {"running": "vllm:requests running"}},
      "the monitor's vLLM series running: 'vllm:requests running' is not a Prometheus metric")],
)  # fmt: skip
def test_bad_settings_are_named(raw: dict[str, object], says: str) -> None:
    with pytest.raises(AcceldeployError) as caught:
        rules.settings(raw)
    assert says in str(caught.value)


def test_every_alert_has_a_runbook_naming_a_command() -> None:
    document = rules.document(rules.settings({"ttft_slo": {"m": "1s"}}))
    alerts = [r for g in document["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) == 13
    for alert in alerts:
        runbook = alert["annotations"]["runbook"]
        assert any(cmd in runbook for cmd in ("acceldeploy ", "ansible-playbook ", "systemctl ",
                                              "journalctl ")), alert["alert"]  # fmt: skip


@promtool
def test_a_half_moved_fleet_fires_the_same_alerts_on_either_name(tmp_path: Path) -> None:
    """Stacks that name every series differently (RENAMED beside vLLM 0.12's): every alert's
    case once with the old names and once with the new; each fires the same, through the
    series recorded from both names."""
    both = {role: f"{rules.DEFAULT_SERIES[role]}|{name}" for role, name in RENAMED.items()}
    path = written(tmp_path, ttft_slo={"qwen3-vl": "2s"}, metrics=both)
    document = yaml.safe_load(path.read_text())
    recorded = {r["record"] for r in document["groups"][0]["rules"]}
    assert "acceldeploy:vllm_time_to_first_token_bucket" in recorded
    check = subprocess.run(["promtool", "check", "rules", "rules.yml"], cwd=tmp_path,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    for label, names in (("old", rules.DEFAULT_SERIES), ("new", RENAMED)):
        case = (DATA / "rules-test.yml").read_text()
        for role, name in names.items():
            case = case.replace(rules.DEFAULT_SERIES[role], name)
        (tmp_path / f"rules-test-{label}.yml").write_text(case)
        test = subprocess.run(["promtool", "test", "rules", f"rules-test-{label}.yml"],
                              cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
        assert test.returncode == 0, label + ": " + test.stdout + test.stderr
