"""What the rollout proofs share (test_upgrade_lab.py, test_stack_upgrade_lab.py): test wheels in
the controller's wheel cache (a marker, and one that breaks `import vllm` only inside systemd),
the stages run one by one as an operator runs them, what a host serves (its launcher's env, the
main PID), a steady client per host through a rollout, and the windows in which the play
switched each host, read from the play's own task timings.

    with Clients(["lab1", "lab2"]) as clients:
        (run,) = stages(extra, "serve")
    figures = one_host_at_a_time(clients, run, ["lab1", "lab2"])
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ansible_run import PlaybookRun, lab_inventory, run_playbook, ssh
from vllm_client import http

from acceldeploy.downloads import wheelhouse
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving.hostplan import host_launches

NAME = "qwen3-vl"
ENVS = "/opt/acceldeploy"
MARKER = ("acceldeploy-lab-upgrade", "1.0")
# `import vllm` fails in a process systemd started (INVOCATION_ID), and only there.
BREAKER = ("acceldeploy-lab-breaks-vllm", "1.0")
BREAKER_PTH = (
    "import os, sys; os.environ.get('INVOCATION_ID') and sys.modules.__setitem__('vllm', None)\n"
)
TEST_WHEELS = {
    MARKER: {"acceldeploy_lab_upgrade.py": "MARKER = 1\n"},
    BREAKER: {"acceldeploy_lab_breaks_vllm.pth": BREAKER_PTH},
}
# What the journal says when the breaker is in the env a service starts from.
BROKEN_IMPORT = "No module named 'vllm.entrypoints'; 'vllm' is not a package"


def pin(package: tuple[str, str]) -> str:
    return "==".join(package)


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


@contextmanager
def cached_wheels(*packages: tuple[str, str]) -> Iterator[Path]:
    """These test wheels (of TEST_WHEELS) in the controller's wheel cache, what the lab's wheel
    server serves and python_env's controller-side check reads; removed afterwards."""
    directory = wheelhouse.wheels_dir(wheelhouse.cache_dir())
    made = [write_wheel(directory, *package, TEST_WHEELS[package]) for package in packages]
    try:
        yield directory
    finally:
        for wheel in made:
            wheel.unlink(missing_ok=True)


def stages(
    extra: dict[str, Any], *names: str, inventory: Path | None = None, timeout: float = 2400
) -> list[PlaybookRun]:
    """Each stage as its own run (as an operator runs them); stops at the first that fails."""
    runs = []
    for name in names:
        where = inventory or lab_inventory()
        runs.append(run_playbook(f"playbooks/{name}.yml", where, extra, timeout=timeout))
        if not runs[-1].ok:
            break
    return runs


def on(hostvars: dict[str, Any], command: str, timeout: float = 60) -> str:
    proc = ssh(hostvars, command, timeout=timeout)
    assert proc.returncode == 0, f"{command}: {proc.stdout[-800:]} {proc.stderr[-800:]}"
    return proc.stdout.strip()


def serving_env(hostvars: dict[str, Any]) -> str:
    """The environment the service's launcher execs (/opt/acceldeploy/venv-<key>)."""
    line = on(hostvars, f"grep -o '{ENVS}/venv-[0-9a-f]*/bin/vllm' "
                        f"/usr/local/libexec/acceldeploy/{NAME}.launch")  # fmt: skip
    return line.removesuffix("/bin/vllm")


def linked_env(hostvars: dict[str, Any]) -> str:
    """The build the environment's path (the `venv` link) points to."""
    return on(hostvars, f"readlink -f {ENVS}/venv")


def env_builds(hostvars: dict[str, Any]) -> list[str]:
    """Every complete build beside the environment's path (python_env's record inside)."""
    found = on(hostvars, f"ls -d {ENVS}/venv-*/acceldeploy-env.json 2>/dev/null || true")
    return sorted(line.rsplit("/", 1)[0] for line in found.splitlines() if line)


def env_vllm(hostvars: dict[str, Any], env: str) -> str:
    """The vLLM version an env holds (its metadata; no import)."""
    script = "import importlib.metadata as m; print(m.version('vllm'))"
    return on(hostvars, f'{env}/bin/python -c "{script}"')


def main_pid(hostvars: dict[str, Any]) -> str:
    return on(hostvars, f"systemctl show -p MainPID --value {NAME}")


def port_of(host: str, inventory: Path | None = None) -> int:
    (launch,) = host_launches(host_vars(str(inventory or lab_inventory()), host))
    return launch.port


def serves(host: str, inventory: Path | None = None) -> bool:
    return http(f"http://127.0.0.1:{port_of(host, inventory)}/v1/models", None, 30)[0] == 200


@dataclass(frozen=True)
class Answer:
    sent: float  # wall clock (time.time()), comparable with the play's task timings
    done: float
    ok: bool


class Clients:
    """One client per host, each sending a short completion every 0.3 s."""

    def __init__(self, hosts: Sequence[str], inventory: Path | None = None) -> None:
        # read here, not in the threads: Ansible's inventory loading is not thread-safe
        self.ports = {h: port_of(h, inventory) for h in hosts}
        self.answers: dict[str, list[Answer]] = {h: [] for h in hosts}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._ask, args=(h,)) for h in hosts]

    def _ask(self, host: str) -> None:
        body = {"model": NAME, "prompt": "Hi", "max_tokens": 2}
        while not self.stop.is_set():
            sent = time.time()
            try:
                status, _ = http(f"http://127.0.0.1:{self.ports[host]}/v1/completions", body, 30)
                ok = status == 200
            except OSError:
                ok = False
            self.answers[host].append(Answer(sent, time.time(), ok))
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
        failed = [a.sent for a in self.answers[host] if not a.ok]
        return (failed[0], failed[-1]) if failed else None

    def during(self, host: str, window: tuple[float, float]) -> list[Answer]:
        """The host's requests in flight at any time inside the window."""
        start, end = window
        return [a for a in self.answers[host] if a.sent <= end and a.done >= start]

    def counts(self, host: str) -> tuple[int, int]:
        """(requests, failed) of the host."""
        answers = self.answers[host]
        return len(answers), sum(not a.ok for a in answers)


def _wall(stamp: str) -> float:
    """The json callback's task timings (UTC, `...Z`) as time.time()."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def switch_windows(run: PlaybookRun, hosts: Sequence[str]) -> dict[str, tuple[float, float]]:
    """host -> (start of its first `Restart |` task, end of its last `Gate |` task): from
    stopping its old service (the drain) until it passed the gate on the new one."""
    windows = {}
    for host in hosts:
        starts = [_wall(s) for _, h, s, _ in run.task_spans("Restart |") if h == host]
        ends = [_wall(e) for _, h, _, e in run.task_spans("Gate |") if h == host]
        if starts and ends:
            windows[host] = (min(starts), max(ends))
    return windows


def one_host_at_a_time(clients: Clients, run: PlaybookRun, hosts: Sequence[str]) -> dict[str, Any]:
    """Asserts the rollout switched the hosts one at a time while the other answered every
    request; returns the figures (per host: requests, failed, seconds switching, and the
    requests the other host answered meanwhile).

    Two readings of "while": the play's own window for each host (its restart until its gate
    passed), and the span from the first to the last request the switching host left
    unanswered."""
    first, second = hosts
    windows = switch_windows(run, hosts)
    assert set(windows) == set(hosts), f"restart and gate not both timed on each host: {windows}"
    (_, first_end), (second_start, _) = windows[first], windows[second]
    assert first_end <= second_start, f"the switches overlapped: {windows}"
    figures: dict[str, Any] = {}
    for host, other in ((first, second), (second, first)):
        meanwhile = clients.during(other, windows[host])
        lost = [a for a in meanwhile if not a.ok]
        assert meanwhile, f"no request reached {other} while {host} switched"
        assert not lost, f"{other} failed {len(lost)} request(s) while {host} switched"
        down = clients.down(host)
        if down is not None:  # its drain and restart lost requests of its own (no balancer)
            dropped = [
                a for a in clients.answers[other] if not a.ok and down[0] <= a.sent <= down[1]
            ]
            assert not dropped, f"{other} failed {len(dropped)} request(s) while {host} was down"
        requests, failed = clients.counts(host)
        figures[host] = {
            "requests": requests,
            "failed": failed,
            "switch_s": round(windows[host][1] - windows[host][0], 1),
            f"answered_by_{other}_meanwhile": len(meanwhile),
        }
    # both clients ran throughout: each host answered before and after its own switch
    for host in hosts:
        answers = clients.answers[host]
        assert len(answers) > 100 and answers[0].ok and answers[-1].ok, (host, len(answers))
    return figures


def built_anything(run: PlaybookRun) -> list[tuple[str, str]]:
    """(host, task) of every install from the wheels or pull from a builder the run made."""
    return [
        (host, name)
        for name, host, result in run.iter_results()
        if ("Install the pinned stack" in name or "Pull the build from its builder" in name)
        and not result.get("skipped")
    ]
