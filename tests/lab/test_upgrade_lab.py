"""Upgrades on the lab with real vLLM (issue 15's acceptance; `make test-slow`, not in `make
test`: two extra ~8 GB environment builds per host). runtime.yml then serve.yml, one host per
batch, as an operator upgrades:

- a pins change (one extra package, from the controller's wheel cache, in every host's env)
  builds a new keyed environment beside the serving one, then switches the hosts one at a
  time: while one restarts, the other answers every request; the old environment is kept and
  a second run changes nothing;
- a broken pins change (a package that passes the build's own `import vllm` proof but makes
  `import vllm` fail inside a systemd service, as a library that needs what only the service
  sees would) stops on the first host, which rolls back to its last good launcher, so the old
  environment, and serves again; the second host is untouched; the play names host and cause.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_run import inventory_hosts, lab_inventory, run_playbook, ssh
from vllm_client import http

from acceldeploy.downloads import wheelhouse
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving.hostplan import host_launches

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NAME = "qwen3-vl"
MARKER = ("acceldeploy-lab-upgrade", "1.0")
# `import vllm` fails in a process systemd started (INVOCATION_ID), and only there.
BREAKER = ("acceldeploy-lab-breaks-vllm", "1.0")
BREAKER_PTH = (
    "import os, sys; os.environ.get('INVOCATION_ID') and sys.modules.__setitem__('vllm', None)\n"
)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel (PEP 427) holding `files`."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    contents = {
        **{path: text.encode() for path, text in files.items()},
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: acceldeploy-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(path, data) for path, data in contents.items()]
    contents[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name_in_wheel, data in contents.items():
            wheel.writestr(name_in_wheel, data)
    return path


@pytest.fixture(scope="module")
def hosts() -> dict[str, dict[str, Any]]:
    found = inventory_hosts(lab_inventory())
    assert len(found) >= 2, "the rollout needs two lab hosts"
    return found


@pytest.fixture(scope="module")
def wheels() -> Iterator[Path]:
    """The two test wheels in the controller's wheel cache (what the lab's wheel server
    serves and python_env's controller-side check reads), removed afterwards."""
    directory = wheelhouse.wheels_dir(wheelhouse.cache_dir())
    made = [
        write_wheel(directory, *MARKER, {"acceldeploy_lab_upgrade.py": "MARKER = 1\n"}),
        write_wheel(directory, *BREAKER, {"acceldeploy_lab_breaks_vllm.pth": BREAKER_PTH}),
    ]
    yield directory
    for wheel in made:
        wheel.unlink(missing_ok=True)


def stages(extra: dict[str, Any], *names: str, timeout: float = 2400) -> list[Any]:
    """Each stage as its own run (as an operator runs them); stops at the first that fails."""
    runs = []
    for name in names:
        runs.append(run_playbook(f"playbooks/{name}.yml", lab_inventory(), extra, timeout=timeout))
        if not runs[-1].ok:
            break
    return runs


def on(hostvars: dict[str, Any], command: str) -> str:
    proc = ssh(hostvars, command, timeout=60)
    assert proc.returncode == 0, f"{command}: {proc.stdout[-800:]} {proc.stderr[-800:]}"
    return proc.stdout.strip()


def serving_env(hostvars: dict[str, Any]) -> str:
    """The environment the service's launcher execs (/opt/acceldeploy/venv-<key>)."""
    line = on(hostvars, f"grep -o '/opt/acceldeploy/venv-[0-9a-f]*/bin/vllm' "
                        f"/usr/local/libexec/acceldeploy/{NAME}.launch")  # fmt: skip
    return line.removesuffix("/bin/vllm")


def main_pid(hostvars: dict[str, Any]) -> str:
    return on(hostvars, f"systemctl show -p MainPID --value {NAME}")


def port_of(host: str) -> int:
    (launch,) = host_launches(host_vars(str(lab_inventory()), host))
    return launch.port


class Clients:
    """One client per host, each sending a short completion every 0.3 s: (time, ok)."""

    def __init__(self, hosts: list[str]) -> None:
        # read here, not in the threads: Ansible's inventory loading is not thread-safe
        self.ports = {h: port_of(h) for h in hosts}
        self.answers: dict[str, list[tuple[float, bool]]] = {h: [] for h in hosts}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._ask, args=(h,)) for h in hosts]

    def _ask(self, host: str) -> None:
        body = {"model": NAME, "prompt": "Hi", "max_tokens": 2}
        while not self.stop.is_set():
            try:
                status, _ = http(f"http://127.0.0.1:{self.ports[host]}/v1/completions", body, 30)
                ok = status == 200
            except OSError:
                ok = False
            self.answers[host].append((time.monotonic(), ok))
            time.sleep(0.3)

    def __enter__(self) -> Clients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def down(self, host: str) -> tuple[float, float] | None:
        """From the first to the last unanswered request of the host (its restart)."""
        failed = [t for t, ok in self.answers[host] if not ok]
        return (failed[0], failed[-1]) if failed else None


@pytest.fixture(scope="module")
def converged(hosts: dict[str, dict[str, Any]]) -> None:
    for run in stages({"vllm_service_serial": len(hosts)}, "runtime", "models", "serve"):
        assert run.ok, run.output


def test_a_pins_change_rolls_through_one_host_at_a_time(converged, hosts, wheels):
    first, second = list(hosts)[:2]
    before = {h: serving_env(v) for h, v in hosts.items()}
    pids = {h: main_pid(v) for h, v in hosts.items()}
    upgrade = {"python_env_extra_packages": ["==".join(MARKER)]}
    started = time.monotonic()
    (built,) = stages(upgrade, "runtime")  # the new env beside the serving one; no restart
    assert built.ok, built.output
    assert all(main_pid(v) == pids[h] for h, v in hosts.items())
    with Clients([first, second]) as clients:
        (run,) = stages(upgrade, "serve")
    assert run.ok, run.output
    print(f"pins change on {len(hosts)} hosts: {time.monotonic() - started:.0f}s")
    for host, hostvars in hosts.items():
        now = serving_env(hostvars)
        assert now != before[host], f"{host} still serves {now}"
        on(hostvars, f"{now}/bin/python -c 'import acceldeploy_lab_upgrade'")
        on(hostvars, f"test -x {before[host]}/bin/vllm")  # the old env is kept
        assert main_pid(hostvars) != pids[host]
    # one host at a time: while one did not answer, the other answered every request
    windows = {h: clients.down(h) for h in (first, second)}
    print(f"unanswered windows: {windows}")
    for host, other in ((first, second), (second, first)):
        window = windows[host]
        if window is None:
            continue  # its drain and restart lost no request (the balancer's part)
        lost = [t for t, ok in clients.answers[other] if not ok and window[0] <= t <= window[1]]
        assert not lost, f"{other} failed {len(lost)} request(s) while {host} restarted"
    # both clients ran throughout: each host answered before and after its own restart
    for host in (first, second):
        answers = clients.answers[host]
        assert len(answers) > 100 and answers[0][1] and answers[-1][1], (host, len(answers))

    for again in stages(upgrade, "runtime", "serve"):
        assert again.ok and all(again.changed(h) == 0 for h in hosts), again.output


def test_a_broken_pins_change_rolls_the_first_host_back(converged, hosts, wheels):
    first, second = list(hosts)[:2]
    before = {h: serving_env(v) for h, v in hosts.items()}
    second_pid = main_pid(hosts[second])
    broken = {"python_env_extra_packages": ["==".join(MARKER), "==".join(BREAKER)]}
    (built,) = stages(broken, "runtime")  # passes the build's own `import vllm` proof
    assert built.ok, built.output
    (run,) = stages(broken, "serve")
    assert not run.ok
    assert run.failed(first) == 1 and run.failed(second) == 0, run.output
    assert f"did not become ready on {first}" in run.output, run.output
    assert f"Rolled back on {first}: {NAME} serve again" in run.output, run.output
    assert "No module named 'vllm.entrypoints'; 'vllm' is not a package" in run.output, run.output
    # the first host serves again on the environment it served before; the second was not
    # reached: same process, same environment
    assert serving_env(hosts[first]) == before[first]
    assert http(f"http://127.0.0.1:{port_of(first)}/v1/models", None, 30)[0] == 200
    assert serving_env(hosts[second]) == before[second]
    assert main_pid(hosts[second]) == second_pid
