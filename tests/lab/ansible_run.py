"""Run ansible-playbook from tests and read what happened, per host.

    from ansible_run import run_playbook, inventory_hosts, ssh

    run = run_playbook("playbooks/host.yml", inventory, extra_vars={"x": 1}, check=True)
    assert run.ok, run.output
    assert run.changed("lab1") == 0
    msgs = run.results("Summary | Host tuning")           # {host: result dict}

Output goes through the ``ansible.posix.json`` callback (stdout is one JSON document), so
per-host recap counts, task results and timings come from data, not from scraping text.
Aggregate callbacks that print (ansible.cfg's profile_tasks) are switched off for the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEFAULT_INVENTORY = REPO / "inventory" / "lab" / "hosts.yml"


def as_at_a_terminal() -> None:
    """Popen's preexec_fn for a command a test interrupts with SIGINT, as Ctrl-C at a terminal
    would: a shell that starts the test run in the background (`make test &`) leaves SIGINT
    ignored in every process under it, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def lab_inventory() -> Path:
    """The inventory lab tests run against: $ACCELDEPLOY_TEST_INVENTORY or the default lab's."""
    return Path(os.environ.get("ACCELDEPLOY_TEST_INVENTORY") or DEFAULT_INVENTORY)


def lab_hosts() -> dict[str, dict[str, Any]]:
    """The running lab's hosts and their variables; skips the test without a lab."""
    import pytest

    inventory = lab_inventory()
    if not inventory.exists():
        pytest.skip(f"no {inventory}: run `python3 tools/lab.py up` first")
    return inventory_hosts(inventory)


def inventory_hosts(inventory: str | Path) -> dict[str, dict[str, Any]]:
    """host -> its variables (group vars merged under host vars) from a YAML inventory file."""
    data = yaml.safe_load(Path(inventory).read_text()) or {}
    hosts: dict[str, dict[str, Any]] = {}

    def walk(group: Mapping[str, Any], inherited: Mapping[str, Any]) -> None:
        group_vars = {**inherited, **(group.get("vars") or {})}
        for name, hostvars in (group.get("hosts") or {}).items():
            hosts[name] = {**hosts.get(name, {}), **group_vars, **(hostvars or {})}
        for child in (group.get("children") or {}).values():
            walk(child or {}, group_vars)

    walk(data.get("all") or {}, {})
    return hosts


def ssh(
    hostvars: Mapping[str, Any], command: str, timeout: float = 60, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command on an inventory host over ssh, the way Ansible reaches it."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR"]
    if hostvars.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(hostvars["ansible_ssh_private_key_file"])]
    if hostvars.get("ansible_port"):
        argv += ["-p", str(hostvars["ansible_port"])]
    argv += str(hostvars.get("ansible_ssh_common_args") or "").split()
    user = hostvars.get("ansible_user")
    address = hostvars.get("ansible_host", "localhost")
    argv += [f"{user}@{address}" if user else str(address), command]
    return subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


def ansible_bin(name: str = "ansible-playbook") -> str:
    """The Ansible command next to this Python (a venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"no {name} next to {sys.executable} nor on PATH")
    return found


@dataclass
class PlaybookRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration: float
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        """For assertion messages: the command, stderr, and the failed tasks' messages (with the
        end of a failed command's stdout: verify's table)."""
        failed = [
            f"{t} [{h}]: {r.get('msg')}" + (f"\n{r['stdout'][-3000:]}" if r.get("stdout") else "")
            for t, h, r in self.iter_results()
            if r.get("failed")
        ]
        return "\n".join([" ".join(self.argv), self.stderr[-4000:], *failed])

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP: host -> {ok, changed, failures, unreachable, skipped, rescued, ignored}."""
        return dict(self.data.get("stats") or {})

    def changed(self, host: str) -> int:
        return int(self.stats.get(host, {}).get("changed", 0))

    def failed(self, host: str) -> int:
        counts = self.stats.get(host, {})
        return int(counts.get("failures", 0)) + int(counts.get("unreachable", 0))

    def iter_results(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(task name, host, result) for every task result, in play order."""
        for play in self.data.get("plays") or []:
            for task in play.get("tasks") or []:
                name = str((task.get("task") or {}).get("name") or "")
                for host, result in (task.get("hosts") or {}).items():
                    yield name, host, result

    def drift(self) -> dict[str, list[str]]:
        """host -> why the no-op path did not apply ([] when it did), from the roles' one
        read-only call (acceldeploy_state)."""
        return {
            host: result["drift"]
            for name, host, result in self.iter_results()
            if "Anything changed since the last converge" in name and "drift" in result
        }

    def results(self, task_name: str) -> dict[str, dict[str, Any]]:
        """host -> result of the (last) task whose name contains ``task_name``."""
        return {h: r for name, h, r in self.iter_results() if task_name in name}

    def task_spans(self, task_name: str) -> list[tuple[str, str, str, str]]:
        """(play name, host, start, end) of each run of tasks whose name contains task_name."""
        spans = []
        for play in self.data.get("plays") or []:
            play_name = str((play.get("play") or {}).get("name") or "")
            for task in play.get("tasks") or []:
                info = task.get("task") or {}
                if task_name not in str(info.get("name") or ""):
                    continue
                duration = info.get("duration") or {}
                for host, result in (task.get("hosts") or {}).items():
                    if not result.get("skipped"):
                        spans.append(
                            (play_name, host, str(duration.get("start")), str(duration.get("end")))
                        )
        return spans


def run_playbook(
    playbook: str | Path | Sequence[str | Path],
    inventory: str | Path | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    *,
    check: bool = False,
    diff: bool = False,
    limit: str | None = None,
    tags: Sequence[str] = (),
    skip_tags: Sequence[str] = (),
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
    cwd: str | Path = REPO,
    command: str | Path | None = None,
) -> PlaybookRun:
    """Run a playbook (path relative to ``cwd``, the repository by default, or absolute;
    several, one after the other, in one ansible-playbook) and parse its JSON output.

    ``command``: another ansible-playbook than the one beside this Python (a venv's of its own).
    Extra vars go as one JSON document, so their types survive (``-e key=value`` makes
    strings). A run that does not print JSON (a syntax error) still returns, with ``data``
    empty and the text in stdout / stderr.
    """
    argv = [str(command or ansible_bin()), "-i", str(inventory or lab_inventory())]
    if extra_vars:
        argv += ["-e", json.dumps(dict(extra_vars))]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    if limit:
        argv += ["--limit", limit]
    if tags:
        argv += ["--tags", ",".join(tags)]
    if skip_tags:
        argv += ["--skip-tags", ",".join(skip_tags)]
    argv += list(args)
    argv += [str(playbook)] if isinstance(playbook, (str, Path)) else [str(p) for p in playbook]
    run_env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",  # not profile_tasks: stdout is JSON
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        **(env or {}),
    }
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    duration = time.monotonic() - started
    try:
        start = proc.stdout.index("{")
        data = json.loads(proc.stdout[start:])
    except ValueError:
        data = {}
    return PlaybookRun(argv, proc.returncode, proc.stdout, proc.stderr, duration, data)
