"""What the unit tests that run a real playbook share: the lab's inventory written to a
temporary directory, and a run's exit code with its ansible.posix.json report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from acceldeploy_lab.inventory import InventoryHost, write_inventory

ROOT = Path(__file__).resolve().parents[2]


def lab_inventory(tmp_path: Path, **extra: dict[str, Any]) -> Path:
    """The lab's inventory (lab3 a gateway, lab4 a monitor, both inheriting the fleet's
    services from group_vars/all as the lab's do), each host's extra variables in host_vars."""
    shutil.copytree(ROOT / "inventory/lab/group_vars", tmp_path / "group_vars")
    path = write_inventory(tmp_path / "hosts.yml", [
        InventoryHost("lab1", 1, 2201), InventoryHost("lab2", 2, 2202),
        InventoryHost("lab3", 3, 2203, gateway=True), InventoryHost("lab4", 4, 2204, monitor=True),
    ], tmp_path / "id")  # fmt: skip
    (tmp_path / "host_vars").mkdir()
    for host, variables in extra.items():
        (tmp_path / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(variables))
    return path


def run_playbook(inventory: Path, playbook: str, *args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook with the ansible.posix.json callback (args: --limit ...)."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         str(ROOT / playbook), *args],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=600,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
             "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"},
    )  # fmt: skip


def playbook_report(inventory: Path, playbook: str, *args: str) -> tuple[int, dict[str, Any]]:
    """ansible-playbook's exit code and its ansible.posix.json report (args: --limit ...)."""
    proc = run_playbook(inventory, playbook, *args)
    return proc.returncode, json.loads(proc.stdout[proc.stdout.index("{") :])
