"""roles/host_tuning's controller-only check (tasks/check.yml): every host_tuning_* variable is
checked without facts, probe or connection, so playbooks/preflight.yml can run it for every
host before any host is contacted; and the role's includes read its own switch variables.

The playbook test runs against hosts whose address is a closed port (127.0.0.1:1): a task that
contacted a host would come back unreachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "host_tuning"
EXAMPLE = REPO / "inventory" / "examples" / "ascend-910b"
# Tasks that run on the controller only (their action plugins need no connection).
CONTROLLER_ONLY = {
    "ansible.builtin.set_fact", "ansible.builtin.assert", "acceldeploy.fleet.acceldeploy_contract"
}  # fmt: skip
TASK_KEYS = {"name", "when", "tags", "no_log", "register", "check_mode", "changed_when"}


def tasks(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def test_check_yml_touches_no_host():
    for task in tasks("check.yml"):
        actions = set(task) - TASK_KEYS
        assert actions <= CONTROLLER_ONLY, f"{task['name']}: {actions}"
        assert "delegate_to" not in task and "block" not in task


def test_validate_runs_the_check_first():
    first = tasks("validate.yml")[0]
    assert first.get("ansible.builtin.import_tasks") == "check.yml"


def test_includes_read_the_roles_own_switches():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert specs["argument_specs"]["check"]["options"] == options
    switches = {}
    for task in tasks("apply.yml"):
        when = task.get("when")
        if when and task["ansible.builtin.import_tasks"] != "bios_redfish.yml":
            switches[task["ansible.builtin.import_tasks"]] = when
    assert switches == {
        "kernel_args.yml": "host_tuning_kernel_args_enabled | bool",
        "sysctls.yml": "host_tuning_sysctls_enabled | bool",
        "hugepages.yml": "host_tuning_hugepages_enabled | bool",
        "governor.yml": "host_tuning_governor_enabled | bool",
        "bios.yml": "host_tuning_bios_audit_enabled | bool",
    }
    for when in switches.values():
        variable = when.split(" ")[0]
        assert variable in defaults and options[variable]["type"] == "bool", variable


BAD_HOSTS: dict[str, tuple[dict[str, Any], str]] = {
    "bad-lots": ({"host_tuning_hugepages": "lots"}, "host_tuning_hugepages"),
    "bad-negative": ({"host_tuning_hugepages": -5}, "host_tuning_hugepages"),
    "bad-switch": ({"host_tuning_sysctls_enabled": "maybe"}, "host_tuning_sysctls_enabled"),
    # Ansible's argument spec reads "y" as a boolean, the role's `| bool` would not.
    "bad-y": ({"host_tuning_reboot": "y"}, "host_tuning_reboot"),
    "bad-batch": ({"host_tuning_reboot_batch": 0}, "host_tuning_reboot_batch"),
    "bad-unit": ({"host_tuning_reboot_services": ["no such!"]}, "host_tuning_reboot_services"),
    "bad-platform": ({"acceldeploy_platform": "tpu"}, "host_tuning_platform"),
}


@pytest.fixture(scope="module")
def check_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of tasks_from: check over the example inventory's hosts and one bad host per
    case, all at 127.0.0.1:1; the ansible.posix.json callback's document."""
    tmp = tmp_path_factory.mktemp("check")
    (tmp / "bad.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "ascend": {
                            "hosts": {name: dict(values) for name, (values, _) in BAD_HOSTS.items()}
                        }
                    }
                }
            }
        )
    )
    playbook = tmp / "check.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "host_tuning check, no host contacted",
                    "hosts": "all",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Check",
                            "ansible.builtin.include_role": {
                                "name": "acceldeploy.fleet.host_tuning",
                                "tasks_from": "check",
                            },
                        }
                    ],
                }
            ],
            sort_keys=False,
        )
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",
        "ANSIBLE_NOCOLOR": "1",
    }
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        *("-i", str(EXAMPLE), "-i", str(tmp / "bad.yml")),
        *("-e", "ansible_host=127.0.0.1", "-e", "ansible_port=1"),
        str(playbook),
    ]
    done = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.stdout.strip().startswith("{"), done.stdout + done.stderr
    return json.loads(done.stdout)


def host_results(run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for play in run["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                out.setdefault(host, []).append(result)
    return out


def test_check_contacts_no_host(check_run):
    stats = check_run["stats"]
    assert set(stats) == {"npu-01", "npu-02", *BAD_HOSTS}
    assert all(s["unreachable"] == 0 for s in stats.values()), stats


def test_check_passes_the_example_inventory(check_run):
    results = host_results(check_run)
    for host in ("npu-01", "npu-02"):
        assert check_run["stats"][host]["failures"] == 0, results[host]
        (settings,) = [
            r["facts"]["host_tuning_settings"]
            for r in results[host]
            if "host_tuning_settings" in (r.get("facts") or {})
        ]
        assert settings["platform"] == "ascend"


@pytest.mark.parametrize("host", sorted(BAD_HOSTS))
def test_check_fails_naming_the_variable(check_run, host):
    _, variable = BAD_HOSTS[host]
    assert check_run["stats"][host]["failures"] == 1
    failed = [r for r in host_results(check_run)[host] if r.get("failed")]
    text = "\n".join(
        str(r.get("msg") or "") + "\n".join(r.get("argument_errors") or []) for r in failed
    )
    assert variable in text, text


@pytest.mark.parametrize(
    "value", [True, False, 0, 1, "true", "False", "YES", "no", "on", "off", "1", "0"]
)
def test_a_switch_the_check_accepts_reads_the_same_through_ansibles_bool(value):
    from ansible.plugins.filter.core import to_bool

    from acceldeploy import hosttuning

    assert hosttuning.as_bool(value, "reboot") is to_bool(value)
