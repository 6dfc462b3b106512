"""verify's judges on recorded facts, and its report formats against the committed schema."""

import json
from pathlib import Path

import jsonschema
import pytest

from acceldeploy.verify import api, hoststate, report
from acceldeploy.verify.model import Check

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas/verify-report.schema.json").read_text())
DROPIN = (
    'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT '
    'cpufreq.default_governor=performance intel_idle.max_cstate=0"\n'
)


def facts(**over):
    base = {
        "cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet",
        "virt": "none",
        "grub_dropin": DROPIN,
        "sysctl_files": {"/etc/sysctl.d/90-acceldeploy.conf": "kernel.numa_balancing = 0\n"},
        "sysctl_live": {"kernel.numa_balancing": "1"},
        "governors": ["performance"],
    }
    return {**base, **over}


def by_name(checks):
    return {c.name: c for c in checks}


def test_missing_kernel_args_fail_on_a_real_host_and_warn_in_a_container():
    real = by_name(hoststate.judge_host("h1", facts()))
    assert real["kernel_args"].status == "fail"
    assert "intel_idle.max_cstate=0" in real["kernel_args"].detail
    assert "reboot" in real["kernel_args"].fix
    assert real["sysctls"].status == "fail"
    boxed = by_name(hoststate.judge_host("h1", facts(virt="systemd-nspawn")))
    assert boxed["kernel_args"].status == "warn" and boxed["sysctls"].status == "warn"


def test_tuned_host_passes():
    good = facts(
        cmdline="root=/dev/sda1 cpufreq.default_governor=performance intel_idle.max_cstate=0",
        sysctl_live={"kernel.numa_balancing": "0"},
    )
    assert {c.status for c in hoststate.judge_host("h1", good)} == {"pass"}


def test_untuned_host_is_skipped_with_the_fix():
    checks = by_name(hoststate.judge_host("h1", facts(grub_dropin=None, sysctl_files={})))
    assert checks["kernel_args"].status == "skip"
    assert checks["kernel_args"].fix == "run playbooks/host.yml"


def test_stopped_unit_fails_with_the_last_journal_error():
    props = {
        "LoadState": "loaded",
        "ActiveState": "failed",
        "Result": "exit-code",
        "UnitFileState": "enabled",
        "NRestarts": "3",
        "journal_errors": ["ValueError: To serve at least one request ..."],
    }
    checks = by_name(hoststate.judge_unit("lab2", "qwen3-vl", props))
    assert checks["unit"].status == "fail"
    assert "ValueError" in checks["unit"].detail
    assert checks["unit"].service == "qwen3-vl"
    assert checks["restarts"].status == "warn"


def test_missing_unit():
    (check,) = hoststate.judge_unit("lab2", "qwen3-vl", {"LoadState": "not-found"})
    assert check.status == "fail" and "not installed" in check.detail


def test_collect_script_is_valid_python():
    script, args = hoststate.collect_script(["qwen3-vl"], hoststate.TunedFiles.from_hostvars({}))
    compile(script, "collect", "exec")
    assert json.loads(args[0]) == ["qwen3-vl"]


def test_generated_images_differ_and_are_png():
    a, b = api.png(32, 16, seed=1), api.png(32, 16, seed=2)
    assert a.startswith(b"\x89PNG\r\n\x1a\n") and a != b


def test_json_report_validates_and_junit_counts_failures():
    checks = [
        Check("lab1", "ssh", "pass", "root@127.0.0.1:2201"),
        Check("lab2", "unit", "fail", "inactive (dead)", "systemctl start qwen3-vl", "qwen3-vl"),
        Check("lab2", "governor", "skip", "no cpufreq"),
    ]
    data = report.to_json(checks, "inventory/lab")
    jsonschema.validate(data, SCHEMA)
    assert data["passed"] is False and data["summary"]["fail"] == 1
    junit = report.to_junit(checks)
    assert 'name="lab2"' in junit and 'failures="1"' in junit


@pytest.mark.parametrize(("columns", "width"), [(None, 100), ("80", 80)])
def test_the_table_into_a_pipe_fits_the_width_and_folds_long_cells(
    columns, width, monkeypatch, capsys
):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    journal = "vllm[123]: RuntimeError: CUDA out of memory while_allocating_a_tensor_named_" * 3
    checks = [
        Check("lab1", "ssh", "pass", "root@127.0.0.1:2201"),
        Check("lab2", "unit", "fail", journal, "journalctl -u qwen3-vl --since=-10min", "qwen3-vl"),
        Check("lab2", "governor", "skip", "no cpufreq"),
    ]
    report.print_table(checks)
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert max(len(line.encode()) for line in lines) <= width  # bytes: ASCII borders
    assert "\x1b[" not in text
    for word in ("host", "service", "check", "status", "detail", "fix", "qwen3-vl", "skip"):
        assert word in text
    folded = "".join(line.split("|")[5].strip() for line in lines if line.count("|") == 7)
    assert journal.replace(" ", "") in folded.replace(" ", "")  # every character, folded
    assert lines[-1] == "FAIL  1 pass, 1 fail, 0 warn, 1 skip"


def test_verify_checks_the_stack_a_run_deployed_with_minus_e():
    """site.yml -e acceldeploy_stack=X: its verify stage passes --stack HOST=X for each host,
    and verify checks those hosts against X, not their inventory's stack."""
    import argparse
    import runpy

    import pytest

    plugin = runpy.run_path(str(ROOT / "plugins/filter/acceldeploy_filters.py"))
    acceldeploy_verify_stack_args = plugin["acceldeploy_verify_stack_args"]

    from acceldeploy.cli import verify as cli
    from acceldeploy.errors import AcceldeployError
    from acceldeploy.verify import runner

    hostvars = {"lab1": {}, "lab2": {"acceldeploy_stack": "cpu-vllm-0.32.0"}}
    args = acceldeploy_verify_stack_args(hostvars, ["lab1", "lab2"])
    assert args == ["--stack", "lab2=cpu-vllm-0.32.0"]
    assert cli.host_stack("lab2=cpu-vllm-0.32.0") == ("lab2", "cpu-vllm-0.32.0")
    with pytest.raises(argparse.ArgumentTypeError, match="is not HOST=STACK"):
        cli.host_stack("lab2")
    options = runner.Options(stacks={"nowhere": "cpu-vllm-0.32.0"})
    with pytest.raises(
        AcceldeployError, match=r"--stack nowhere=cpu-vllm-0\.32\.0: nowhere is not"
    ):
        runner.run(str(ROOT / "inventory/examples/ascend-910b"), "all", options)
