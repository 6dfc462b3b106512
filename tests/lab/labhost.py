"""Running things on the lab's hosts for tests: a shell command, the vLLM venv (python_env
role), the tiny model from the mirror, a transient vLLM unit."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ansible_run import run_playbook

from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving.hostplan import host_launches
from acceldeploy.serving.values import Launch
from acceldeploy.verify.gateway import runtime_api_command, server_states
from acceldeploy_lab import tinymodel
from acceldeploy_lab.mirror import default_mirror

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = Path(os.environ.get("ACCELDEPLOY_TEST_INVENTORY", ROOT / "inventory/lab/hosts.yml"))
VENV = "/opt/acceldeploy/venv"


def on_host(host: str, command: str, timeout: float = 600, check: bool = True) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/lab.py"), "ssh", host, command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def lab_cli(*args: str, timeout: float = 900) -> None:
    """tools/lab.py with these arguments (up --suites, down, ...); fails showing its output."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/lab.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@contextmanager
def offline_isolated_lab(
    write_inventory: Callable[[], Path], bundle: Path, *up: str
) -> Iterator[Path]:
    """The isolated lab (`tools/lab.py up --isolated *up`) with nothing to install from but an
    offline bundle: once the hosts are up, `write_inventory()` writes the inventory, the bundle
    is built for it into `bundle` with the lab's mirror up, then the mirror and the wheel
    server stop. Yields the inventory; the shared-network lab (mirror, wheel server, 2 hosts)
    is back at the end."""
    lab_cli("down")
    lab_cli("up", "--isolated", *up)
    try:
        inventory = write_inventory()
        lab_cli("mirror", "start")
        built = subprocess.run(
            [sys.executable, "-m", "acceldeploy", "bundle", "build", "-i", str(inventory),
             "--out", str(bundle)],
            capture_output=True, text=True, timeout=1800,
            env={**os.environ, "PYTHONPATH": str(ROOT / "tools")},
        )  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
        lab_cli("mirror", "stop")
        lab_cli("wheels", "stop")
        yield inventory
    finally:
        lab_cli("down")
        lab_cli("mirror", "start")
        lab_cli("wheels", "start")
        lab_cli("up", "--hosts", "2")


def verify_report(inventory: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """tools/verify.py --json on an inventory: its exit code (0 pass, 1 a check failed) and
    its report."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/verify.py"), "-i", str(inventory), "--json",
         "--timeout", "60", *args], capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def launch_of(host: str, inventory: Path = INVENTORY) -> Launch:
    (service,) = host_launches(host_vars(str(inventory), host))
    return service


def install_venv(host: str) -> str:
    """The vLLM venv, built by the python_env role (playbooks/runtime.yml) as site.yml does:
    from the controller's wheel cache (tools/lab.py wheels), a no-op when already built."""
    run = run_playbook("playbooks/runtime.yml", INVENTORY, limit=host, timeout=1200)
    assert run.ok, run.output[-4000:]
    return f"{VENV}/bin/python"


def download_model(host: str, python: str, path: str) -> None:
    """snapshot_download through the lab mirror into an empty directory."""
    script = (
        "import huggingface_hub, sys; print(huggingface_hub.snapshot_download("
        "sys.argv[1], revision='main', local_dir=sys.argv[2]))"
    )
    on_host(
        host,
        f"rm -rf {shlex.quote(path)} && HF_ENDPOINT={default_mirror().endpoint} "
        f"HF_HUB_DISABLE_TELEMETRY=1 {python} -c {shlex.quote(script)} "
        f"{tinymodel.MODEL_ID} {shlex.quote(path)}",
    )


def start_unit(
    host: str, unit: str, launch: Launch, extra_env: dict[str, str] | None = None
) -> None:
    env = {**launch.env, **(extra_env or {})}
    setenv = " ".join(f"--setenv={shlex.quote(f'{k}={v}')}" for k, v in env.items())
    on_host(
        host,
        f"systemctl stop {unit} 2>/dev/null; systemctl reset-failed {unit} 2>/dev/null; "
        f"systemd-run --unit={unit} --property=WorkingDirectory=/tmp {setenv} "
        f"{launch.command_line()}",
    )


def unit_alive(host: str, unit: str) -> None:
    state = on_host(host, f"systemctl show -p ActiveState --value {unit}", check=False).strip()
    if state not in ("active", "activating"):
        log = on_host(host, f"journalctl -u {unit} --no-pager -n 60", check=False)
        raise AssertionError(f"{unit} on {host} is {state}:\n{log}")


def haproxy(host: str, command: str) -> str:
    """A command on the HAProxy runtime API of a lab gateway host, and its answer."""
    return on_host(host, runtime_api_command("/run/haproxy/admin.sock", command))


def haproxy_servers(host: str, backend: str) -> dict[str, dict[str, str]]:
    """{server: its `show stat` row} of one backend, from HAProxy's own counters."""
    rows = server_states(haproxy(host, "show stat"))
    return {server: row for (proxy, server), row in rows.items() if proxy == backend}


PROMETHEUS = "http://127.0.0.1:9090"  # the monitor lab3's; the shared-network lab reaches it


def prometheus_api(path: str, **query: str) -> Any:
    """The `data` of a Prometheus HTTP API answer from lab3."""
    url = f"{PROMETHEUS}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=10) as answer:
        data = json.loads(answer.read())
    assert data["status"] == "success", data
    return data["data"]


def wait(predicate: Any, timeout: float, every: float = 1.0) -> Any:
    """predicate()'s first true value within timeout seconds, else its last value."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()) and time.monotonic() < deadline:
        time.sleep(every)
    return value


def targets_up() -> dict[tuple[str, str], str]:
    """{(job, host): health} of the monitor's active targets, by Prometheus's HTTP API."""
    active = prometheus_api("/api/v1/targets", state="active")["activeTargets"]
    return {(t["labels"]["job"], t["labels"]["host"]): t["health"] for t in active}


@contextmanager
def nft_drop(match: str, family: str = "inet", hook: str = "output") -> Iterator[None]:
    """An nftables drop of the packets `match` matches, in a table of the tests' own, for the
    block. On the shared-network lab the hook is output: its hosts share this machine's network
    namespace, so this machine's filter is theirs. On the isolated lab it is forward in the
    bridge family: packets between hosts cross the lab bridge."""
    table = "acceldeploy_test_drop"
    rules = (f"table {family} {table} {{\n chain blocked {{\n  type filter hook {hook} priority 0;\n"
             f"  {match} counter drop\n }}\n}}\n")  # fmt: skip
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", family, table], check=True)
