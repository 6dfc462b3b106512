"""Host tuning decisions besides GRUB: input checks, containers, hugepages against memory,
reboot reasons, the cmdline check after a reboot, the BIOS audit, Redfish, the summary."""

from __future__ import annotations

from typing import Any

import pytest
from test_host_tuning_render import DEBIAN_TOOLS, facts, inputs, probe

from acceldeploy import hosttuning
from acceldeploy.errors import AcceldeployError

LAB_FACTS = {
    **facts("Debian", "Debian", "12.15", "6.18.44"),
    "virtualization_type": "container",
    "virtualization_role": "guest",
    "virtualization_tech_guest": ["container", "systemd-nspawn"],
}


def lab_probe(**extra):
    data = probe(tools={"update-grub": "/usr/sbin/update-grub"})
    data.update(
        container="systemd-nspawn",
        writable={"proc_sys": False, "sys": False},
        meminfo={"MemTotal": 24684084, "Hugepagesize": 2048, "HugePages_Total": 0},
    )
    data.update(extra)
    return data


# --------------------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    ("override", "variable"),
    [
        ({"platform": "tpu"}, "acceldeploy_platform (host_tuning_platform)"),
        ({"platform": ""}, "host_tuning_platform"),
        ({"hugepages": "lots"}, "host_tuning_hugepages"),
        ({"hugepages": 1.5}, "host_tuning_hugepages"),
        ({"hugepages": -1}, "host_tuning_hugepages"),
        ({"reboot_batch": 0}, "host_tuning_reboot_batch"),
        ({"reboot_batch": "one"}, "host_tuning_reboot_batch"),
        ({"reboot_max_fail_percentage": 101}, "host_tuning_reboot_max_fail_percentage"),
        ({"reboot": "maybe"}, "host_tuning_reboot"),
        # Only what Ansible's `bool` filter reads as such (the role's `when:` lines use it).
        ({"reboot": " true"}, "host_tuning_reboot"),
        ({"sysctls_enabled": ""}, "host_tuning_sysctls_enabled"),
        ({"hugepages_enabled": "y"}, "host_tuning_hugepages_enabled"),
        ({"sysctls_extra": {"not a key": 1}}, "host_tuning_sysctls_extra"),
        ({"sysctl_file": "relative.conf"}, "host_tuning_sysctl_file"),
        ({"reboot_services": ["bad unit!"]}, "host_tuning_reboot_services"),
        ({"governor": "turbo"}, "host_tuning_governor"),
        ({"governor": "Performance"}, "host_tuning_governor"),
        ({"bios_redfish_endpoint": "https://10.0.0.21"}, "host_tuning_bios_redfish_username"),
        (
            {"bios_redfish_endpoint": "https://10.0.0.21", "bios_redfish_credentials": True},
            "host_tuning_bios_redfish_attributes",
        ),
        ({"bios_redfish_endpoint": "10.0.0.21"}, "host_tuning_bios_redfish_endpoint"),
        # Non-empty switches Redfish on in tasks/main.yml: never silently empty after rstrip.
        ({"bios_redfish_endpoint": "/"}, "host_tuning_bios_redfish_endpoint"),
    ],
)
def test_bad_input_names_the_variable(override, variable):
    with pytest.raises(AcceldeployError) as err:
        hosttuning.settings({**inputs("cpu"), **override})
    assert variable in str(err.value)


def test_strings_from_extra_vars_are_coerced():
    cfg = hosttuning.settings(
        inputs("cpu", hugepages="128", reboot="true", reboot_batch="2", reboot_services=["a"])
    )
    assert (cfg.hugepages, cfg.reboot, cfg.reboot_batch) == (128, True, 2)
    assert cfg.reboot_services == ["a.service"]


def test_ascend_profile_sysctls():
    cfg = hosttuning.settings(inputs("ascend"))
    assert cfg.sysctls == {
        "kernel.numa_balancing": "0",
        "vm.swappiness": "0",
        "kernel.sched_migration_cost_ns": "50000",
    }


# --------------------------------------------------------------------------- hugepages


def test_seed_hugepages_on_a_small_host_are_refused_with_the_fix():
    with pytest.raises(AcceldeployError) as err:
        hosttuning.plan(inputs("gaudi"), LAB_FACTS, lab_probe())
    message = str(err.value)
    assert "host_tuning_hugepages=15000 x 2048 kB = 29.3 GiB" in message
    assert "23.5 GiB" in message
    assert "lower host_tuning_hugepages to 6026 or less" in message


def test_seed_hugepages_fit_a_real_gaudi_host():
    plan = hosttuning.plan(
        inputs("gaudi"),
        facts("Ubuntu", "Debian", "22.04", "5.15.0-1-generic"),
        probe(tools=DEBIAN_TOOLS),
    )
    assert plan["hugepages"]["enabled"] and plan["hugepages"]["count"] == 15000
    assert plan["hugepages"]["live"] is True


# --------------------------------------------------------------------------- containers


def test_lab_container_persists_and_applies_nothing_live():
    plan = hosttuning.plan(inputs("cpu", hugepages=64), LAB_FACTS, lab_probe())
    assert plan["host"]["container"] is True
    assert plan["sysctls"]["live"] is False and plan["hugepages"]["live"] is False
    assert plan["kernel"]["regenerate"] is False
    assert plan["kernel"]["cmdline_applicable"] is False
    assert plan["kernel"]["missing"] == []
    assert plan["governor"]["live"] is False


def test_sysctls_the_kernel_lacks_are_skipped_with_a_reason():
    plan = hosttuning.plan(
        inputs("ascend"),
        facts("Ubuntu", "Debian", "22.04", "6.8.0-45-generic", "aarch64"),
        probe(tools=DEBIAN_TOOLS),
    )
    assert "kernel.sched_migration_cost_ns" not in plan["sysctls"]["persist"]
    assert "not in /proc/sys" in plan["sysctls"]["unavailable"]["kernel.sched_migration_cost_ns"]


# --------------------------------------------------------------------------- reboot


def test_reboot_reasons_in_a_container_follow_the_file():
    plan = hosttuning.plan(inputs("cpu"), LAB_FACTS, lab_probe())
    assert hosttuning.reboot_reasons(plan, [{"changed": False}, {"skipped": True}]) == []
    (reason,) = hosttuning.reboot_reasons(plan, [{"changed": True}, {"skipped": True}])
    assert "changed since this host booted" in reason
    written_after_boot = lab_probe(
        boot_time=1000.0,
        files={"/etc/default/grub.d/90-acceldeploy.cfg": {"exists": True, "mtime": 1500.0}},
    )
    plan = hosttuning.plan(inputs("cpu"), LAB_FACTS, written_after_boot)
    assert hosttuning.reboot_reasons(plan, False)
    booted_since = lab_probe(
        boot_time=2000.0,
        files={"/etc/default/grub.d/90-acceldeploy.cfg": {"exists": True, "mtime": 1500.0}},
    )
    plan = hosttuning.plan(inputs("cpu"), LAB_FACTS, booted_since)
    assert hosttuning.reboot_reasons(plan, False) == []


def debian_cpu_plan() -> dict[str, Any]:
    """The cpu platform's plan on Debian 12 booted from /boot/grub/grub.cfg with just ``ro``."""
    configs = {"/boot/grub/grub.cfg": {"stub": False, "options": ["ro"]}}
    return hosttuning.plan(
        inputs("cpu"),
        facts("Debian", "Debian", "12", "6.1.0"),
        probe(tools=DEBIAN_TOOLS, configs=configs),
    )


def test_reboot_reason_on_a_host_comes_from_proc_cmdline():
    plan = debian_cpu_plan()
    assert hosttuning.reboot_reasons(plan, False) == [
        "kernel arguments not in /proc/cmdline: cpufreq.default_governor=performance "
        "intel_idle.max_cstate=0"
    ]
    assert hosttuning.reboot_reasons(plan, False, ["ProcessorC6"])[1].startswith("BIOS settings")


def test_cmdline_check_after_reboot():
    plan = debian_cpu_plan()
    good = hosttuning.cmdline_check(
        plan, {"cmdline": "ro cpufreq.default_governor=performance intel_idle.max_cstate=0"}
    )
    assert good["applicable"] and good["missing"] == []
    bad = hosttuning.cmdline_check(plan, {"cmdline": "ro"})
    assert bad["missing"] and "host_tuning_grub_cfg" in bad["message"]
    lab = hosttuning.cmdline_check(hosttuning.plan(inputs("cpu"), LAB_FACTS, lab_probe()), {})
    assert lab == {
        "applicable": False,
        "missing": [],
        "message": "not applicable (systemd-nspawn): /proc/cmdline is the machine's kernel",
    }


# --------------------------------------------------------------------------- BIOS


def intel_cpu(governor="powersave", c6_disabled=False, pstate=None):
    return {
        "vendor": "GenuineIntel",
        "cpufreq": {
            "driver": "acpi-cpufreq" if pstate is None else "intel_pstate",
            "policies": {
                f"policy{i}": {"governor": governor, "available": ["performance", "powersave"]}
                for i in range(4)
            },
        },
        "intel_pstate": pstate,
        "cpuidle": {
            "driver": "intel_idle",
            "states": [
                {"name": "POLL", "latency": 0, "disabled": False},
                {"name": "C1", "latency": 2, "disabled": False},
                {"name": "C1E", "latency": 10, "disabled": False},
                {"name": "C6", "latency": 170, "disabled": c6_disabled},
            ],
        },
    }


def test_bios_audit_finds_c6_pstates_and_governor_with_fixes():
    plan = hosttuning.plan(
        inputs("gaudi", hugepages=0), facts("Ubuntu", "Debian", "22.04", "5.15.0"), probe()
    )
    audit = hosttuning.bios_audit(
        plan,
        {"cpu": intel_cpu(), "dmi": {"sys_vendor": "Supermicro", "product_name": "SYS-820GH"}},
    )
    assert audit["applicable"]
    assert [f["item"] for f in audit["findings"]] == ["C-states", "P-states", "Governor"]
    assert "C6 (170 us)" in audit["findings"][0]["found"]
    assert "C6" in audit["findings"][0]["fix"]
    assert len(audit["warnings"]) == 3 and all("Fix:" in w for w in audit["warnings"])
    assert audit["system"].startswith("Supermicro SYS-820GH")


def test_bios_audit_clean_host_and_container():
    plan = hosttuning.plan(
        inputs("gaudi", hugepages=0), facts("Ubuntu", "Debian", "22.04", "5.15.0"), probe()
    )
    cpu = intel_cpu("performance", c6_disabled=True, pstate={"status": "active", "no_turbo": "0"})
    assert hosttuning.bios_audit(plan, {"cpu": cpu})["findings"] == []
    lab = hosttuning.plan(inputs("cpu"), LAB_FACTS, lab_probe())
    audit = hosttuning.bios_audit(lab, {"cpu": intel_cpu()})
    assert not audit["applicable"] and audit["warnings"] == []
    assert len(audit["findings"]) == 3


def test_redfish_changes_patch_only_what_differs_and_is_not_staged():
    wanted = {"ProcessorC6": "Disabled", "PowerProfile": "Performance", "Turbo": "Enabled"}
    bios = {
        "Attributes": {"ProcessorC6": "Enabled", "PowerProfile": "Balanced", "Turbo": "Enabled"},
        "@Redfish.Settings": {"SettingsObject": {"@odata.id": "/redfish/v1/Systems/1/Bios/SD"}},
    }
    pending = {"Attributes": {"PowerProfile": "Performance"}}
    changes = hosttuning.redfish_changes(wanted, bios, pending)
    assert changes == {
        "patch": {"ProcessorC6": "Disabled"},
        "staged": ["PowerProfile", "ProcessorC6"],
        "ok": ["Turbo"],
    }
    url = hosttuning.redfish_settings_url(
        "https://bmc", "https://bmc/redfish/v1/Systems/1/Bios", bios
    )
    assert url == "https://bmc/redfish/v1/Systems/1/Bios/SD"
    with pytest.raises(AcceldeployError, match="host_tuning_bios_redfish_attributes"):
        hosttuning.redfish_changes({"Nope": 1}, bios, None)


# --------------------------------------------------------------------------- summary


def test_lab_summary_reads_well():
    plan = hosttuning.plan(
        inputs("cpu", hugepages=64, sysctls_extra={"vm.swappiness": 10}), LAB_FACTS, lab_probe()
    )
    outcome = {
        "check_mode": False,
        "kernel_file": [{"changed": True}, {"skipped": True}],
        "sysctls": {"results": [{"changed": True}]},
        "hugepages": {"changed": True},
        "reboot_reasons": hosttuning.reboot_reasons(plan, True),
        "bios_audit": hosttuning.bios_audit(plan, lab_probe()),
    }
    lines = hosttuning.summary(plan, outcome, lab_probe())
    text = "\n".join(lines)
    assert lines[0] == "platform cpu, Debian 12.15, 6.18.44, systemd-nspawn"
    assert "in /etc/default/grub.d/90-acceldeploy.cfg (changed)" in text
    assert "boot config not regenerated: container" in text
    assert "vm.swappiness is 60" in text and "not applied live" in text
    assert "hugepages: 64 x 2048 kB = 0.1 GiB of 23.5 GiB" in text
    assert "reboot: pending" in text and "host_tuning_reboot: true" in text
    assert "bios audit: not applicable" in text
