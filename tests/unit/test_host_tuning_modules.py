"""The role's own modules against a fake sysfs (the lab has no cpufreq to try them on):
host_tuning_governor sets, honours check mode and refuses what a policy does not offer;
host_tuning_probe reads cpufreq, cpuidle and intel_pstate the way the BIOS audit expects."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

LIBRARY = Path(__file__).resolve().parents[2] / "plugins" / "modules"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, LIBRARY / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(module: ModuleType, args: dict, capsys, check_mode: bool = False) -> dict:
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}
    basic._ANSIBLE_ARGS = to_bytes(json.dumps(payload))
    basic._ANSIBLE_PROFILE = "legacy"
    with pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    cpu = tmp_path / "cpu"
    for i in range(2):
        policy = cpu / "cpufreq" / f"policy{i}"
        policy.mkdir(parents=True)
        (policy / "scaling_governor").write_text("powersave\n")
        (policy / "scaling_available_governors").write_text("performance powersave\n")
        (policy / "scaling_driver").write_text("intel_pstate\n")
        (policy / "energy_performance_preference").write_text("balance_performance\n")
    for i, (name, latency, disabled) in enumerate(
        [("POLL", 0, 0), ("C1", 2, 0), ("C1E", 10, 0), ("C6", 170, 1)]
    ):
        state = cpu / "cpu0" / "cpuidle" / f"state{i}"
        state.mkdir(parents=True)
        (state / "name").write_text(f"{name}\n")
        (state / "latency").write_text(f"{latency}\n")
        (state / "disable").write_text(f"{disabled}\n")
    (cpu / "cpuidle").mkdir()
    (cpu / "cpuidle" / "current_driver").write_text("intel_idle\n")
    (cpu / "intel_pstate").mkdir()
    (cpu / "intel_pstate" / "status").write_text("active\n")
    (cpu / "intel_pstate" / "no_turbo").write_text("0\n")
    return cpu


def test_governor_sets_every_policy_once(sysfs, capsys, monkeypatch):
    governor = load("host_tuning_governor")
    monkeypatch.setattr(governor, "POLICIES", str(sysfs / "cpufreq" / "policy*"))

    dry = run(governor, {"governor": "performance"}, capsys, check_mode=True)
    assert dry["changed"] and dry["changed_policies"] == ["policy0", "policy1"]
    assert (sysfs / "cpufreq/policy0/scaling_governor").read_text().strip() == "powersave"

    done = run(governor, {"governor": "performance"}, capsys)
    assert done["changed"] and done["policies"] == {
        "policy0": "performance",
        "policy1": "performance",
    }
    assert "policy0: powersave" in done["diff"]["before"]
    assert (sysfs / "cpufreq/policy1/scaling_governor").read_text().strip() == "performance"

    again = run(governor, {"governor": "performance"}, capsys)
    assert not again["changed"]


def test_governor_not_offered_fails(sysfs, capsys, monkeypatch):
    governor = load("host_tuning_governor")
    monkeypatch.setattr(governor, "POLICIES", str(sysfs / "cpufreq" / "policy*"))
    result = run(governor, {"governor": "schedutil"}, capsys)
    assert result["failed"] and "does not offer governor schedutil" in result["msg"]


def test_probe_reads_cpufreq_cpuidle_and_pstate(sysfs, monkeypatch):
    probe = load("host_tuning_probe")
    monkeypatch.setattr(probe, "CPU", str(sysfs))
    freq = probe.cpufreq()
    assert freq["driver"] == "intel_pstate"
    assert freq["policies"]["policy0"] == {
        "governor": "powersave",
        "available": ["performance", "powersave"],
        "epp": "balance_performance",
    }
    idle = probe.cpuidle()
    assert idle["driver"] == "intel_idle"
    assert [(s["name"], s["latency"], s["disabled"]) for s in idle["states"]] == [
        ("POLL", 0, False),
        ("C1", 2, False),
        ("C1E", 10, False),
        ("C6", 170, True),
    ]
    assert probe.intel_pstate() == {"status": "active", "no_turbo": "0"}


def test_probe_reads_grub_linux_lines(tmp_path, monkeypatch):
    probe = load("host_tuning_probe")
    cfg = tmp_path / "grub.cfg"
    cfg.write_text(
        "menuentry 'Debian' {\n"
        "\tlinux\t/vmlinuz-6.1.0 root=UUID=1 ro quiet cpufreq.default_governor=performance\n"
        "}\n"
    )
    stub = tmp_path / "stub.cfg"
    stub.write_text(
        "search --fs-uuid --set=dev 1\nset prefix=($dev)/grub2\nconfigfile $prefix/grub.cfg\n"
    )
    monkeypatch.setattr(probe, "GRUB_CFGS", (str(cfg), str(stub)))
    configs, _bls = probe.boot_configs()
    assert configs[str(cfg)] == {
        "stub": False,
        "options": ["root=UUID=1 ro quiet cpufreq.default_governor=performance"],
    }
    assert configs[str(stub)] == {"stub": True, "options": []}
