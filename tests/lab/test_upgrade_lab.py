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

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_run import inventory_hosts, lab_inventory
from rollout import (
    BREAKER,
    BROKEN_IMPORT,
    MARKER,
    NAME,
    Clients,
    cached_wheels,
    main_pid,
    on,
    pin,
    port_of,
    serving_env,
    stages,
)
from vllm_client import http

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def hosts() -> dict[str, dict[str, Any]]:
    found = inventory_hosts(lab_inventory())
    assert len(found) >= 2, "the rollout needs two lab hosts"
    return found


@pytest.fixture(scope="module")
def wheels() -> Iterator[Path]:
    """The two test wheels in the controller's wheel cache, removed afterwards."""
    with cached_wheels(MARKER, BREAKER) as directory:
        yield directory


@pytest.fixture(scope="module")
def converged(hosts: dict[str, dict[str, Any]]) -> None:
    for run in stages({"vllm_service_serial": len(hosts)}, "runtime", "models", "serve"):
        assert run.ok, run.output


def test_a_pins_change_rolls_through_one_host_at_a_time(converged, hosts, wheels):
    first, second = list(hosts)[:2]
    before = {h: serving_env(v) for h, v in hosts.items()}
    pids = {h: main_pid(v) for h, v in hosts.items()}
    upgrade = {"python_env_extra_packages": [pin(MARKER)]}
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
        lost = [a for a in clients.answers[other] if not a.ok and window[0] <= a.sent <= window[1]]
        assert not lost, f"{other} failed {len(lost)} request(s) while {host} restarted"
    # both clients ran throughout: each host answered before and after its own restart
    for host in (first, second):
        answers = clients.answers[host]
        assert len(answers) > 100 and answers[0].ok and answers[-1].ok, (host, len(answers))

    for again in stages(upgrade, "runtime", "serve"):
        assert again.ok and all(again.changed(h) == 0 for h in hosts), again.output


def test_a_broken_pins_change_rolls_the_first_host_back(converged, hosts, wheels):
    first, second = list(hosts)[:2]
    before = {h: serving_env(v) for h, v in hosts.items()}
    second_pid = main_pid(hosts[second])
    broken = {"python_env_extra_packages": [pin(MARKER), pin(BREAKER)]}
    (built,) = stages(broken, "runtime")  # passes the build's own `import vllm` proof
    assert built.ok, built.output
    (run,) = stages(broken, "serve")
    assert not run.ok
    assert run.failed(first) == 1 and run.failed(second) == 0, run.output
    assert f"did not become ready on {first}" in run.output, run.output
    assert f"Rolled back on {first}: {NAME} serve again" in run.output, run.output
    assert BROKEN_IMPORT in run.output, run.output
    # the first host serves again on the environment it served before; the second was not
    # reached: same process, same environment
    assert serving_env(hosts[first]) == before[first]
    assert http(f"http://127.0.0.1:{port_of(first)}/v1/models", None, 30)[0] == 200
    assert serving_env(hosts[second]) == before[second]
    assert main_pid(hosts[second]) == second_pid
