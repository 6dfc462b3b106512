"""The acceldeploy.fleet collection the way a user outside this repository gets it: built with
`ansible-galaxy collection build`, installed with `ansible-galaxy collection install -p` into a
temporary collections path, and applied from a playbook in a temporary directory (its own
ansible.cfg, not the repository's; the working directory outside the repository):
acceldeploy.fleet.host_tuning on lab1 converges, and the second run changes nothing (the
no-op path). The controller's Python is this one: its acceldeploy package is what the
collection's filters import (docs/developers/collection.md).
Runs against $ACCELDEPLOY_TEST_INVENTORY (default inventory/lab/hosts.yml)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import REPO, ansible_bin, lab_hosts, lab_inventory, run_playbook, ssh

pytestmark = pytest.mark.lab

HOST = "lab1"
SYSCTL_FILE = "/etc/sysctl.d/90-acceldeploy.conf"
# test_host_tuning.py's variables: the same files on lab1 whichever test ran last.
EXTRA: dict[str, Any] = {
    "host_tuning_hugepages": 64,
    "host_tuning_sysctls_extra": {"vm.swappiness": 10},
}
# What a user's own ansible.cfg would hold; nothing of the repository's (no collections_path,
# no module_utils): the collection is found through ANSIBLE_COLLECTIONS_PATH alone.
CONFIG = """\
[defaults]
interpreter_python = auto_silent
retry_files_enabled = false
nocows = true

[ssh_connection]
pipelining = true
ssh_args = -o ControlMaster=auto -o ControlPersist=120s -o ServerAliveInterval=30
"""
# As playbooks/host.yml applies it: the role, then its summary (which records the converge).
PLAYBOOK = [
    {
        "name": "Host tuning from the installed collection",
        "hosts": HOST,
        "gather_facts": False,
        "roles": [{"role": "acceldeploy.fleet.host_tuning"}],
    },
    {
        "name": "Host tuning summary",
        "hosts": HOST,
        "gather_facts": False,
        "tasks": [
            {
                "name": "What is tuned, what waits for a reboot",
                "ansible.builtin.include_role": {
                    "name": "acceldeploy.fleet.host_tuning",
                    "tasks_from": "summary",
                },
                "tags": ["always"],
            }
        ],
    },
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The collection built from this repository and installed into <tmp>/collections, and a
    directory outside the repository holding the playbook and its ansible.cfg."""
    assert HOST in lab_hosts()  # skips without a lab
    tmp = tmp_path_factory.mktemp("collection-lab")
    assert not tmp.resolve().is_relative_to(REPO)
    galaxy = ansible_bin("ansible-galaxy")
    built = subprocess.run(
        [galaxy, "collection", "build", "--output-path", str(tmp / "build"), str(REPO)],
        cwd=tmp, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = (tmp / "build").glob("acceldeploy-fleet-*.tar.gz")
    collections = tmp / "collections"
    work = tmp / "work"
    work.mkdir()
    (work / "ansible.cfg").write_text(CONFIG)
    (work / "host.yml").write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    # the user's configuration, not the repository's (whose collections_path already holds an
    # acceldeploy.fleet 0.1.0: ansible-galaxy would skip the install as done)
    done = subprocess.run(
        [galaxy, "collection", "install", "-p", str(collections), str(tarball)],
        cwd=work, env={**os.environ, **environment(collections, work)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (collections / "ansible_collections/acceldeploy/fleet/MANIFEST.json").is_file()
    # From there, the one acceldeploy.fleet Ansible sees is the installed one.
    listed = subprocess.run(
        [galaxy, "collection", "list", "acceldeploy.fleet", "--format", "json"],
        cwd=work, env={**os.environ, **environment(collections, work)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert list(json.loads(listed.stdout)) == [str(collections / "ansible_collections")]
    return {"collections": collections, "work": work}


def environment(collections: Path, work: Path) -> dict[str, str]:
    return {
        "ANSIBLE_CONFIG": str(work / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
    }


def apply(installed: dict[str, Path]) -> Any:
    work = installed["work"]
    env = environment(installed["collections"], work)
    return run_playbook(work / "host.yml", lab_inventory(), EXTRA, env=env, cwd=work)


def test_the_installed_collection_tunes_a_lab_host_and_a_rerun_changes_nothing(installed):
    hostvars = lab_hosts()[HOST]
    first = apply(installed)
    assert first.ok, first.output
    assert first.results("Validate | Anything changed since the last converge")
    sysctls = ssh(hostvars, f"cat {SYSCTL_FILE}")
    assert sysctls.returncode == 0, sysctls.stderr
    assert "vm.swappiness=10" in sysctls.stdout

    again = apply(installed)
    assert again.ok, again.output
    assert again.changed(HOST) == 0, again.output
    assert again.drift() == {HOST: []}  # the no-op path: the record the first run left
