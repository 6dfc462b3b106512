"""The lab hosts themselves (needs `tools/lab.py up` first): systemd, reboot, Ansible reach."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventory" / "lab" / "hosts.yml"
REBOOT_TIMEOUT = 120.0

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab_hosts() -> dict[str, dict[str, Any]]:
    if not INVENTORY.exists():
        pytest.skip(f"no {INVENTORY.relative_to(REPO)}: run `python3 tools/lab.py up` first")
    data = yaml.safe_load(INVENTORY.read_text())
    hosts = data["all"]["children"]["lab"]["hosts"]
    assert hosts, f"{INVENTORY} lists no hosts"
    return dict(hosts)


def ssh(hostvars: dict[str, Any], command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    argv = [
        "ssh",
        "-i",
        hostvars["ansible_ssh_private_key_file"],
        "-p",
        str(hostvars["ansible_port"]),
        *hostvars["ansible_ssh_common_args"].split(),
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "-o",
        "LogLevel=ERROR",
        f"{hostvars['ansible_user']}@{hostvars['ansible_host']}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def boot_id(hostvars: dict[str, Any]) -> str:
    result = ssh(hostvars, "cat /proc/sys/kernel/random/boot_id")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def wait_new_boot(hostvars: dict[str, Any], old: str) -> str:
    deadline = time.monotonic() + REBOOT_TIMEOUT
    while time.monotonic() < deadline:
        try:
            result = ssh(hostvars, "cat /proc/sys/kernel/random/boot_id", timeout=10)
        except subprocess.TimeoutExpired:
            continue
        new = result.stdout.strip()
        if result.returncode == 0 and new and new != old:
            return new
        time.sleep(0.5)
    pytest.fail(f"no new boot id within {REBOOT_TIMEOUT:.0f}s (still {old})")


def system_state(hostvars: dict[str, Any]) -> str:
    return ssh(hostvars, "systemctl is-system-running --wait", timeout=120).stdout.strip()


def ansible_bin() -> str:
    found = shutil.which("ansible") or str(Path(sys.executable).parent / "ansible")
    if not Path(found).exists():
        pytest.fail("no `ansible` on PATH nor next to this Python")
    return found


def test_every_host_runs_systemd_clean(lab_hosts: dict[str, dict[str, Any]]) -> None:
    for name, hostvars in lab_hosts.items():
        state = system_state(hostvars)
        failed = ssh(hostvars, "systemctl --failed --no-legend --plain").stdout
        assert state == "running", f"{name}: is-system-running = {state}; failed: {failed}"
        assert ssh(hostvars, "cat /proc/1/comm").stdout.strip() == "systemd"
        assert ssh(hostvars, "hostname").stdout.strip() == name


def test_every_host_runs_its_inventory_suite(lab_hosts: dict[str, dict[str, Any]]) -> None:
    for name, hostvars in lab_hosts.items():
        codename = ssh(hostvars, ". /etc/os-release && echo $VERSION_CODENAME").stdout.strip()
        assert codename == hostvars["lab_suite"], f"{name}: inventory says {hostvars['lab_suite']}"


def test_hosts_are_distinct(lab_hosts: dict[str, dict[str, Any]]) -> None:
    ids = {ssh(h, "cat /etc/machine-id").stdout.strip() for h in lab_hosts.values()}
    boots = {boot_id(h) for h in lab_hosts.values()}
    assert len(ids) == len(lab_hosts)
    assert len(boots) == len(lab_hosts)


def test_reboot_inside_host_comes_back(lab_hosts: dict[str, dict[str, Any]]) -> None:
    hostvars = lab_hosts["lab1"]
    before = boot_id(hostvars)
    marker = f"/root/reboot-marker-{before}"
    assert ssh(hostvars, f"touch {marker}").returncode == 0
    ssh(hostvars, "systemctl reboot")
    wait_new_boot(hostvars, before)
    assert system_state(hostvars) == "running"
    assert ssh(hostvars, f"test -e {marker} && rm {marker}").returncode == 0, "state lost"


def test_ansible_ping_and_reboot_module(lab_hosts: dict[str, dict[str, Any]]) -> None:
    ansible = ansible_bin()
    ping = subprocess.run(
        [ansible, "-i", "inventory/lab", "all", "-m", "ping"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ping.returncode == 0, ping.stdout + ping.stderr
    for name in lab_hosts:
        assert f"{name} | SUCCESS" in ping.stdout

    target = sorted(lab_hosts)[-1]
    before = boot_id(lab_hosts[target])
    reboot = subprocess.run(
        [ansible, "-i", "inventory/lab", target, "-m", "ansible.builtin.reboot"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=REBOOT_TIMEOUT + 60,
    )
    assert reboot.returncode == 0, reboot.stdout + reboot.stderr
    assert boot_id(lab_hosts[target]) != before
    assert system_state(lab_hosts[target]) == "running"
