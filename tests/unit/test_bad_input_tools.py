"""bench.py and tune.py check their whole input on the controller before the first connection to
any host, with the plan the roles use (node addresses included): a refusal is one line on
stderr and exit 2 with nothing contacted; accepted input goes as far as the first contact.

The inventory is the unmodified 2-node example with every host pointed at a closed local port,
and every connection (a socket's connect, an ssh process) is recorded and stopped in-process:
no test reaches the network."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy import cli
from acceldeploy.tune import apply

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory/examples/ascend-910b-2node"
SERVICE = "deepseek-r1"
SSH = {"ssh", "scp", "sftp", "sshpass", "rsync"}  # programs that would reach a host
LOCAL = {"npu-01": "127.0.0.31", "npu-02": "127.0.0.32"}  # node addresses, never dialled


class Contact(BaseException):
    """Raised at the first connection attempt (BaseException: no `except Exception` of the
    tools or of paramiko turns it into an ordinary error)."""


@pytest.fixture
def contacts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every connection attempt, recorded and stopped before it leaves the process."""
    seen: list[Any] = []

    def connect(self: socket.socket, address: Any) -> None:
        seen.append(tuple(address)[:2])
        raise Contact(address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(tuple(address)[:2])
        raise Contact(address)

    spawn = subprocess.Popen.__init__

    def popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        program = args if isinstance(args, str | bytes) else args[0]
        if Path(str(program).split()[0]).name in SSH:
            seen.append(("spawn", args))
            raise Contact(args)
        spawn(self, args, *rest, **kwargs)  # a local helper (ctypes runs ldconfig)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    return seen


def _local(tree: Any) -> None:
    """Every host of a hosts.yml tree at 127.0.0.1:9 (closed), node addresses on loopback."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "hosts" and isinstance(value, dict):
                for host in value:
                    value[host] = {**(value[host] or {}), "ansible_host": "127.0.0.1",
                                   "ansible_port": 9, "acceldeploy_node_ip": LOCAL[host]}  # fmt: skip
            else:
                _local(value)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """The example, copied; its hosts at a closed local port."""
    inv = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    _local(hosts)
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return inv


def bench(inventory: Path, *args: str) -> int:
    out = inventory.parent / "bench-results"
    return cli.main(["bench", "-i", str(inventory), "--out", str(out), *args], prog="bench.py")


def tune(inventory: Path, host: str, space: str, *args: str) -> int:
    argv = ["-i", str(inventory), "--host", host, "--service", SERVICE, "--profile", "smoke",
            "--space", space, "--sla", "p99_ttft<=2s", "--out", str(inventory.parent / "tune")]  # fmt: skip
    return cli.main(["tune", *argv, *args], prog="tune.py")


def refused(capsys: pytest.CaptureFixture[str], tool: str) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{tool}: error: "), err
    return lines[0]


def test_bench_worker_is_refused_naming_its_head_before_any_contact(inventory, contacts, capsys):
    assert bench(inventory, "--limit", "npu-02", "--profile", "smoke") == 2
    line = refused(capsys, "bench.py")
    assert "npu-02 is a worker node" in line and SERVICE in line and "--limit npu-01" in line
    assert contacts == []


def test_bench_head_is_accepted_up_to_its_first_contact(inventory, contacts, capsys):
    """The head's group is planned with its nodes' addresses (no false "not in the
    inventory"): nothing is refused, and the first connection is to the host's address."""
    with pytest.raises(Contact):
        bench(inventory, "--limit", "npu-01", "--profile", "smoke")
    assert contacts[0] == ("127.0.0.1", 9)
    assert capsys.readouterr().err == ""


def test_bench_unknown_profile_is_refused_before_any_contact(inventory, contacts, capsys):
    assert bench(inventory, "--limit", "npu-01", "--profile", "no-such") == 2
    assert "unknown bench profile 'no-such'" in refused(capsys, "bench.py")
    assert contacts == []


def test_bench_unknown_service_is_refused_before_any_contact(inventory, contacts, capsys):
    assert bench(inventory, "--profile", "smoke", "--service", "nope") == 2
    assert "--service nope" in refused(capsys, "bench.py")
    assert contacts == []


def test_tune_worker_is_refused_naming_its_head_before_any_contact(inventory, contacts, capsys):
    assert tune(inventory, "npu-02", "max_num_seqs=4,8") == 2
    line = refused(capsys, "tune.py")
    assert "--host npu-02" in line and SERVICE in line and "--host npu-01" in line
    assert contacts == []


def test_tune_head_is_accepted_up_to_its_first_contact(inventory, contacts, capsys):
    with pytest.raises(Contact):
        tune(inventory, "npu-01", "max_num_seqs=4,8")
    assert contacts[0] == ("127.0.0.1", 9)
    assert capsys.readouterr().err == ""


def test_tune_space_the_planner_refuses_whole_is_refused_before_any_contact(
    inventory, contacts, capsys
):
    assert tune(inventory, "npu-01", "max_model_len=10000000,20000000") == 2
    line = refused(capsys, "tune.py")
    assert "--space" in line and "refuses all 2" in line
    assert "max_model_len=10000000: " in line and "max_position_embeddings" in line
    assert contacts == []


def test_tune_space_partly_refused_says_how_many_and_goes_on(inventory, contacts, capsys):
    with pytest.raises(Contact):
        tune(inventory, "npu-01", "max_model_len=16384,10000000")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "1 of 2 points skipped" in err[0], err
    assert "max_model_len=10000000: " in err[0]
    assert contacts[0] == ("127.0.0.1", 9)


def test_tune_apply_without_a_vars_file_is_refused_before_any_contact(inventory, contacts, capsys):
    """The services in the inventory file itself: --apply has no vars file to write into."""
    group_vars = inventory / "group_vars" / "all.yml"
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["all"]["vars"] = yaml.safe_load(group_vars.read_text())
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    group_vars.unlink()
    assert tune(inventory, "npu-01", "max_num_seqs=4,8", "--apply") == 2
    line = refused(capsys, "tune.py")
    assert line.startswith("tune.py: error: --apply: ") and "host_vars/npu-01.yml" in line
    assert contacts == []


def test_tune_apply_finds_the_vars_file_of_a_directory_inventory(inventory, contacts, capsys):
    """-i DIR: group_vars/ is inside it (not beside it)."""
    got = apply.target(inventory, "npu-01", ["ascend", "all"], SERVICE)
    assert got == inventory / "group_vars" / "all.yml"
    with pytest.raises(Contact):
        tune(inventory, "npu-01", "max_num_seqs=4", "--apply")
    assert capsys.readouterr().err == ""


# the CLIs themselves: one line, exit 2, no traceback; a connection would exit 99
WRAPPER = """
import os, runpy, socket, sys
def refuse(self, address):
    sys.stderr.write(f"contact {address}\\n")
    raise SystemExit(99)
socket.socket.connect = refuse
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # as `python tools/TOOL` has it
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize(
    "tool, args",
    [
        ("bench.py", ["--limit", "npu-02", "--profile", "smoke"]),
        ("tune.py", ["--host", "npu-02", "--service", SERVICE, "--profile", "smoke",
                     "--space", "max_num_seqs=4", "--sla", "p99_ttft<=2s"]),
    ],
)  # fmt: skip
def test_the_tools_refuse_a_worker_in_one_line(inventory, tool, args):
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(ROOT / "tools" / tool), "-i", str(inventory), *args],
        capture_output=True, text=True, timeout=120, cwd=inventory.parent,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "its head npu-01 serves it" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(("runs", "says"), [("1", "must be >= 2, got 1"),
                                            ("21", "must be <= 20, got 21"),
                                            ("three", "must be a whole number, got 'three'")])  # fmt: skip
def test_tune_runs_out_of_bounds_is_refused_naming_the_option(
    inventory, contacts, capsys, runs, says
):
    with pytest.raises(SystemExit) as exit_:
        tune(inventory, "npu-01", "max_num_seqs=4,8", "--runs", runs)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --runs: " + says in err, err
    assert contacts == []
