"""GRUB decisions and the exact files and commands roles/host_tuning produces, on Debian /
Ubuntu and openEuler-style hosts, BIOS and UEFI (facts as Ansible and the probe give them).

The drop-in is rendered from the role's own template and the /etc/default/grub line from the
role's own task, so what is asserted here is what lands on the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from acceldeploy import hosttuning
from acceldeploy.errors import AcceldeployError
from acceldeploy.hosttuning import kernelargs

ROLE = Path(__file__).resolve().parents[2] / "roles" / "host_tuning"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())

OPENEULER_GRUB = """\
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR="$(sed 's, release .*$,,g' /etc/system-release)"
GRUB_DEFAULT=saved
GRUB_DISABLE_SUBMENU=true
GRUB_TERMINAL_OUTPUT="console"
GRUB_CMDLINE_LINUX="resume=/dev/mapper/openeuler-swap rd.lvm.lv=openeuler/root rd.lvm.lv=openeuler/swap crashkernel=512M"
GRUB_DISABLE_RECOVERY="true"
"""
OPENEULER_OPTS = (
    "root=/dev/mapper/openeuler-root ro resume=/dev/mapper/openeuler-swap crashkernel=512M"
)


def inputs(platform: str, **override: Any) -> dict[str, Any]:
    """The role's inputs as vars/main.yml builds them, from the shipped defaults."""
    profile = DEFAULTS["host_tuning_profiles"][platform]
    data: dict[str, Any] = {
        "platform": platform,
        "profiles": DEFAULTS["host_tuning_profiles"],
        "kernel_args_enabled": True,
        "kernel_args": profile["kernel_args"],
        "kernel_args_conditional": profile["kernel_args_conditional"],
        "kernel_args_extra": [],
        "grub_dropin": DEFAULTS["host_tuning_grub_dropin"],
        "grub_cfg": "",
        "sysctls_enabled": True,
        "sysctls": profile["sysctls"],
        "sysctls_extra": {},
        "sysctl_file": DEFAULTS["host_tuning_sysctl_file"],
        "hugepages_enabled": True,
        "hugepages": profile["hugepages"],
        "hugepages_max_percent": DEFAULTS["host_tuning_hugepages_max_percent"],
        "hugepages_file": DEFAULTS["host_tuning_hugepages_file"],
        "governor_enabled": True,
        "governor": profile["governor"],
        "governor_disable_units": DEFAULTS["host_tuning_governor_disable_units"],
        "bios_audit_enabled": True,
        "bios_redfish_endpoint": "",
        "bios_redfish_credentials": False,
        "bios_redfish_system": DEFAULTS["host_tuning_bios_redfish_system"],
        "bios_redfish_attributes": {},
        "reboot": False,
        "reboot_batch": 1,
        "reboot_max_fail_percentage": 0,
        "reboot_timeout": 1800,
        "reboot_services": ["qwen3-vl"],
    }
    data.update(override)
    return data


def facts(distribution: str, os_family: str, version: str, kernel: str, arch: str = "x86_64"):
    return {
        "distribution": distribution,
        "os_family": os_family,
        "distribution_version": version,
        "kernel": kernel,
        "architecture": arch,
        "virtualization_type": "NA",
        "virtualization_role": "NA",
        "virtualization_tech_guest": [],
    }


def probe(
    efi: bool = False,
    tools: dict[str, str] | None = None,
    configs: dict[str, Any] | None = None,
    default_grub: str | None = None,
    bls: bool = False,
    cmdline: str = "BOOT_IMAGE=/vmlinuz ro quiet",
) -> dict[str, Any]:
    return {
        "cmdline": cmdline,
        "efi": efi,
        "container": "",
        "writable": {"proc_sys": True, "sys": True},
        "sysctl": {"kernel.numa_balancing": "1", "vm.swappiness": "60", "vm.nr_hugepages": "0"},
        "meminfo": {"MemTotal": 1056 * 1024 * 1024, "Hugepagesize": 2048, "HugePages_Total": 0},
        "cpu": {},
        "grub": {
            "tools": tools or {},
            "default_grub": default_grub,
            "configs": configs or {},
            "bls": bls,
        },
    }


DEBIAN_TOOLS = {"update-grub": "/usr/sbin/update-grub", "grub-mkconfig": "/usr/sbin/grub-mkconfig"}
RPM_TOOLS = {"grub2-mkconfig": "/usr/sbin/grub2-mkconfig", "grubby": "/usr/sbin/grubby"}


def render_dropin(plan: dict[str, Any]) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"), keep_trailing_newline=True
    )
    return env.get_template("grub-dropin.cfg.j2").render(
        ansible_managed="Ansible managed", host_tuning_plan=plan
    )


def render_default_grub_line(plan: dict[str, Any]) -> str:
    tasks = yaml.safe_load((ROLE / "tasks" / "kernel_args.yml").read_text())
    (task,) = [t for t in tasks if "ansible.builtin.lineinfile" in t]
    return jinja2.Template(task["ansible.builtin.lineinfile"]["line"]).render(host_tuning_plan=plan)


# --------------------------------------------------------------------------- Debian / Ubuntu


@pytest.mark.parametrize("efi", [False, True], ids=["bios", "uefi"])
def test_debian_gaudi_dropin_and_update_grub(efi):
    configs = {"/boot/grub/grub.cfg": {"stub": False, "options": ["root=UUID=1 ro quiet"]}}
    if efi:  # Debian's EFI grub.cfg only loads /boot/grub/grub.cfg
        configs["/boot/efi/EFI/debian/grub.cfg"] = {"stub": True, "options": []}
    plan = hosttuning.plan(
        inputs("gaudi", hugepages=0),
        facts("Debian", "Debian", "12.7", "6.1.0-26-amd64"),
        probe(efi=efi, tools=DEBIAN_TOOLS, configs=configs),
    )
    kernel = plan["kernel"]
    assert kernel["args"] == ["cpufreq.default_governor=performance", "intel_idle.max_cstate=0"]
    grub = kernel["grub"]
    assert grub["path"] == "/etc/default/grub.d/90-acceldeploy.cfg"
    assert grub["cfg_path"] == "/boot/grub/grub.cfg"
    assert grub["commands"] == [["/usr/sbin/update-grub"]]
    assert grub["config_stale"] is True and kernel["regenerate"] is True
    assert kernel["missing"] == kernel["args"]
    assert render_dropin(plan) == (
        "# Ansible managed (roles/host_tuning, platform gaudi)\n"
        "# Kernel arguments for accelerator serving; update-grub reads this after "
        "/etc/default/grub.\n"
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT '
        'cpufreq.default_governor=performance intel_idle.max_cstate=0"\n'
    )


def test_ubuntu_kernel_6_8_gaudi_gets_iommu_passthrough():
    plan = hosttuning.plan(
        inputs("gaudi", hugepages=0),
        facts("Ubuntu", "Debian", "24.04", "6.8.0-45-generic"),
        probe(efi=True, tools=DEBIAN_TOOLS),
    )
    assert plan["kernel"]["args"] == [
        "cpufreq.default_governor=performance",
        "intel_idle.max_cstate=0",
        "iommu=pt",
        "intel_iommu=on",
    ]
    assert 'intel_idle.max_cstate=0 iommu=pt intel_iommu=on"' in render_dropin(plan)
    # No boot config seen: nothing to regenerate, and no reboot asked for.
    assert plan["kernel"]["regenerate"] is False
    assert hosttuning.reboot_reasons(plan, True) == []


@pytest.mark.parametrize("kernel", ["6.5.0-41-generic", "5.15.0-122-generic", "6.11.0-9-generic"])
def test_other_ubuntu_kernels_do_not_get_iommu_args(kernel):
    plan = hosttuning.plan(
        inputs("gaudi", hugepages=0),
        facts("Ubuntu", "Debian", "22.04", kernel),
        probe(tools=DEBIAN_TOOLS),
    )
    assert "iommu=pt" not in plan["kernel"]["args"]


def test_debian_without_update_grub_uses_grub_mkconfig():
    plan = hosttuning.plan(
        inputs("cpu"),
        facts("Debian", "Debian", "12", "6.1.0"),
        probe(tools={"grub-mkconfig": "/usr/sbin/grub-mkconfig"}),
    )
    assert plan["kernel"]["grub"]["commands"] == [
        ["/usr/sbin/grub-mkconfig", "-o", "/boot/grub/grub.cfg"]
    ]


def test_debian_config_already_carries_the_args_is_not_stale():
    opts = "root=UUID=1 ro quiet cpufreq.default_governor=performance intel_idle.max_cstate=0"
    plan = hosttuning.plan(
        inputs("cpu"),
        facts("Debian", "Debian", "12", "6.1.0"),
        probe(
            tools=DEBIAN_TOOLS,
            configs={"/boot/grub/grub.cfg": {"stub": False, "options": [opts]}},
            cmdline="BOOT_IMAGE=/vmlinuz " + opts,
        ),
    )
    assert plan["kernel"]["grub"]["config_stale"] is False
    assert plan["kernel"]["missing"] == []
    assert hosttuning.reboot_reasons(plan, False) == []


# --------------------------------------------------------------------------- openEuler family


def test_openeuler_bios_default_grub_and_grub2_mkconfig():
    plan = hosttuning.plan(
        inputs("ascend"),
        facts("openEuler", "RedHat", "22.03", "5.10.0-182.0.0.95.oe2203sp3.aarch64", "aarch64"),
        probe(
            tools=RPM_TOOLS,
            configs={"/boot/grub2/grub.cfg": {"stub": False, "options": [OPENEULER_OPTS]}},
            default_grub=OPENEULER_GRUB,
        ),
    )
    grub = plan["kernel"]["grub"]
    assert grub["path"] == "/etc/default/grub"
    assert grub["cfg_path"] == "/boot/grub2/grub.cfg"
    assert grub["commands"] == [["/usr/sbin/grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]]
    assert grub["write"] is True
    assert render_default_grub_line(plan) == (
        'GRUB_CMDLINE_LINUX="resume=/dev/mapper/openeuler-swap rd.lvm.lv=openeuler/root '
        'rd.lvm.lv=openeuler/swap crashkernel=512M cpufreq.default_governor=performance"'
    )


def test_openeuler_uefi_regenerates_the_efi_grub_cfg():
    plan = hosttuning.plan(
        inputs("gaudi", hugepages=0),
        facts("openEuler", "RedHat", "22.03", "5.10.0-182.0.0.95.oe2203sp3.x86_64"),
        probe(
            efi=True,
            tools=RPM_TOOLS,
            configs={
                "/boot/efi/EFI/openEuler/grub.cfg": {"stub": False, "options": [OPENEULER_OPTS]},
                "/boot/efi/EFI/BOOT/grub.cfg": {"stub": True, "options": []},
            },
            default_grub=OPENEULER_GRUB,
        ),
    )
    grub = plan["kernel"]["grub"]
    assert grub["cfg_path"] == "/boot/efi/EFI/openEuler/grub.cfg"
    assert grub["commands"] == [
        ["/usr/sbin/grub2-mkconfig", "-o", "/boot/efi/EFI/openEuler/grub.cfg"]
    ]
    assert render_default_grub_line(plan).endswith(
        'crashkernel=512M cpufreq.default_governor=performance intel_idle.max_cstate=0"'
    )


@pytest.mark.parametrize(
    ("distribution", "expected"),
    [
        ("openEuler", "/boot/efi/EFI/openEuler/grub.cfg"),
        ("EulerOS", "/boot/efi/EFI/euleros/grub.cfg"),
        ("Kylin Linux Advanced Server", "/boot/efi/EFI/kylin/grub.cfg"),
        ("CentOS", "/boot/efi/EFI/centos/grub.cfg"),
    ],
)
def test_uefi_without_a_grub_cfg_yet_uses_the_vendor_directory(distribution, expected):
    plan = hosttuning.plan(
        inputs("cpu"),
        facts(distribution, "RedHat", "1", "5.10.0"),
        probe(efi=True, tools=RPM_TOOLS, default_grub=OPENEULER_GRUB),
    )
    assert plan["kernel"]["grub"]["cfg_path"] == expected
    assert plan["kernel"]["grub"]["commands"] == [["/usr/sbin/grub2-mkconfig", "-o", expected]]


def test_rhel9_uefi_stub_and_bls_entries_use_grub2_cfg_and_grubby():
    plan = hosttuning.plan(
        inputs("cpu"),
        facts("RedHat", "RedHat", "9.4", "5.14.0-427.el9.x86_64"),
        probe(
            efi=True,
            tools=RPM_TOOLS,
            bls=True,
            configs={
                "/boot/efi/EFI/redhat/grub.cfg": {"stub": True, "options": []},
                "/boot/grub2/grub.cfg": {"stub": False, "options": []},
                "/boot/loader/entries/abc-5.14.0.conf": {"stub": False, "options": ["ro rhgb"]},
            },
            default_grub='GRUB_CMDLINE_LINUX="rhgb quiet"\n',
        ),
    )
    grub = plan["kernel"]["grub"]
    assert grub["cfg_path"] == "/boot/grub2/grub.cfg"
    assert grub["commands"] == [
        ["/usr/sbin/grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"],
        [
            "/usr/sbin/grubby",
            "--update-kernel=ALL",
            "--args=cpufreq.default_governor=performance intel_idle.max_cstate=0",
        ],
    ]
    assert grub["config_stale"] is True


def test_default_grub_already_right_is_not_rewritten_and_values_are_replaced():
    done = 'GRUB_CMDLINE_LINUX="quiet cpufreq.default_governor=performance"\n'
    plan = hosttuning.plan(
        inputs("ascend"),
        facts("openEuler", "RedHat", "22.03", "5.10.0", "aarch64"),
        probe(tools=RPM_TOOLS, default_grub=done),
    )
    assert plan["kernel"]["grub"]["write"] is False
    wrong = 'GRUB_CMDLINE_LINUX="intel_idle.max_cstate=1 quiet"\n'
    plan = hosttuning.plan(
        inputs("cpu"),
        facts("openEuler", "RedHat", "22.03", "5.10.0"),
        probe(tools=RPM_TOOLS, default_grub=wrong),
    )
    assert plan["kernel"]["grub"]["value"] == (
        "intel_idle.max_cstate=0 quiet cpufreq.default_governor=performance"
    )


def test_grub_cfg_override_wins():
    plan = hosttuning.plan(
        inputs("cpu", grub_cfg="/boot/efi/EFI/custom/grub.cfg"),
        facts("openEuler", "RedHat", "22.03", "5.10.0"),
        probe(efi=True, tools=RPM_TOOLS),
    )
    assert plan["kernel"]["grub"]["commands"] == [
        ["/usr/sbin/grub2-mkconfig", "-o", "/boot/efi/EFI/custom/grub.cfg"]
    ]


def test_aarch64_drops_x86_only_arguments():
    plan = hosttuning.plan(
        inputs("gaudi", hugepages=0),
        facts("openEuler", "RedHat", "22.03", "5.10.0", "aarch64"),
        probe(tools=RPM_TOOLS),
    )
    assert plan["kernel"]["args"] == ["cpufreq.default_governor=performance"]
    assert plan["kernel"]["dropped"] == [
        {"arg": "intel_idle.max_cstate=0", "reason": "x86 only, host is aarch64"}
    ]


def test_unknown_os_family_is_refused_naming_the_switch():
    with pytest.raises(AcceldeployError, match="host_tuning_kernel_args_enabled"):
        hosttuning.plan(inputs("cpu"), facts("SLES", "Suse", "15", "5.14"), probe())


def test_governor_argument_follows_the_governor():
    plan = hosttuning.plan(
        inputs("cpu", governor="schedutil"),
        facts("Debian", "Debian", "12", "6.1.0"),
        probe(tools=DEBIAN_TOOLS),
    )
    assert plan["kernel"]["args"][0] == "cpufreq.default_governor=schedutil"
    assert "cpufreq.default_governor=performance" not in plan["kernel"]["args"]


# --------------------------------------------------------------------------- command lines


def test_missing_compares_values_and_the_last_occurrence():
    cmdline = 'BOOT_IMAGE=/vmlinuz intel_idle.max_cstate=1 quiet intel_idle.max_cstate=0 x="a b"'
    assert kernelargs.missing(["intel_idle.max_cstate=0", "quiet"], cmdline) == []
    assert kernelargs.missing(["intel_idle.max_cstate=1"], cmdline) == ["intel_idle.max_cstate=1"]
    assert kernelargs.missing(["iommu=pt", "quiet"], cmdline) == ["iommu=pt"]
    assert kernelargs.missing(["x=a b"], cmdline) == []


def test_init_arguments_after_double_dash_do_not_count():
    assert kernelargs.missing(["single"], "ro quiet -- single") == ["single"]


def test_merge_is_idempotent_and_keeps_order():
    once = kernelargs.merge("ro quiet iommu=off", ["iommu=pt", "intel_iommu=on"])
    assert once == "ro quiet iommu=pt intel_iommu=on"
    assert kernelargs.merge(once, ["iommu=pt", "intel_iommu=on"]) == once


@pytest.mark.parametrize("bad", ["two words", 'x="q"', "a;reboot", "$(id)", 3, ""])
def test_bad_kernel_arguments_are_refused(bad):
    with pytest.raises(AcceldeployError, match="host_tuning_kernel_args"):
        hosttuning.settings(inputs("cpu", kernel_args_extra=[bad]))
