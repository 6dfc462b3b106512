"""roles/vllm_service on the lab hosts (playbooks/serve.yml), with real vLLM 0.12.0 (CPU):
converge -> served on every host; a second run changes nothing and restarts nothing; a killed
vLLM comes back; a new model revision switches and the old one is pruned only after the new
one serves; a retune's restart drains the requests in flight first (and runs the balancer
hooks), while the other host serves throughout; a rollout where the last host gets a flag that
fails at start-up stops there (the failed host rolls back to its last good unit and serves
again; with acceldeploy_rollback_all the host an earlier batch switched goes back too, else it
keeps serving the new unit; without rollback the crash loop stops at the start limit) and a
re-run completes; bad inputs fail before any host changes.

The tests share the converged hosts and run in this order. Each leaves them as the inventory
says, except the retune test (its host keeps the retune) and the bad-flag test (both hosts
back on what they served before it). `make test-slow` runs the ones marked slow: the model
revision round trip and the crash loop without rollback, which ends with a fixing re-run.

Needs the lab with the vLLM venv (python_env) and the tiny model (model_weights) on the hosts;
ACCELDEPLOY_TEST_INVENTORY picks another lab instance.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import REPO, inventory_hosts, lab_inventory, run_playbook, ssh
from vllm_client import http

from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving.hostplan import host_launches

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/serve.yml"
NAME = "qwen3-vl"
LAST_GOOD = "/var/lib/acceldeploy/vllm-last-good"
DRAIN_TOKENS = 2000  # ~15 s on the lab


@pytest.fixture(scope="module")
def inventory() -> Path:
    path = lab_inventory()
    if not path.exists():
        pytest.fail(f"{path} missing: bring the lab up with `make lab`")
    return path


@pytest.fixture(scope="module")
def hosts(inventory: Path) -> dict[str, dict[str, Any]]:
    found = inventory_hosts(inventory)
    assert len(found) >= 2, "the rollout tests need two lab hosts"
    return found


def on(hostvars: dict[str, Any], command: str, timeout: float = 60) -> str:
    proc = ssh(hostvars, command, timeout=timeout)
    assert proc.returncode == 0, f"{command}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return proc.stdout.strip()


def port_of(inventory: Path, host: str) -> int:
    (launch,) = host_launches(host_vars(str(inventory), host))
    return launch.port


def show(hostvars: dict[str, Any], prop: str) -> str:
    return on(hostvars, f"systemctl show -p {prop} --value {NAME}.service")


def serving(hostvars: dict[str, Any], port: int) -> bool:
    proc = ssh(hostvars, f"curl -sf http://127.0.0.1:{port}/v1/models", timeout=30)
    return proc.returncode == 0 and json.loads(proc.stdout)["data"][0]["id"] == NAME


def wait_for(predicate: Any, timeout: float, step: float = 3) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def overlay(inventory: Path, tmp: Path, per_host: dict[str, dict[str, Any]]) -> Path:
    """A copy of the inventory with host_vars/<host>.yml added (per-host overrides)."""
    shutil.copy(inventory, tmp / inventory.name)
    if (inventory.parent / "group_vars").is_dir():
        shutil.copytree(inventory.parent / "group_vars", tmp / "group_vars")
    (tmp / "host_vars").mkdir()
    for host, values in per_host.items():
        (tmp / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))
    return tmp / inventory.name


def service_spec(inventory: Path, host: str, **changes: Any) -> list[dict[str, Any]]:
    (spec,) = host_vars(str(inventory), host)["acceldeploy_services"]
    for key, value in changes.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return [spec]


def both_at_once(hosts: dict[str, Any]) -> dict[str, Any]:
    return {"vllm_service_serial": len(hosts)}


@pytest.fixture(scope="module")
def converged(inventory: Path, hosts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    # What serve needs on every host, from the stages before it: the venv and the model, both
    # stages in one ansible-playbook, and checked in full (the models stage then meets hosts
    # python_env has already met).
    ready = run_playbook(["playbooks/runtime.yml", "playbooks/models.yml"], inventory,
                         {"acceldeploy_full_check": True}, timeout=1500)  # fmt: skip
    assert ready.ok, ready.output
    # Both hosts at once: the rollout order is test_bad_flag_on_last_host's subject.
    run = run_playbook(PLAYBOOK, inventory, both_at_once(hosts), timeout=1500)
    assert run.ok, run.output
    return {"run": run, "pids": {h: show(v, "MainPID") for h, v in hosts.items()}}


def test_converge_serves_on_every_host(converged, inventory, hosts):
    print(f"converge: {converged['run'].duration:.0f}s")
    for host, hostvars in hosts.items():
        assert show(hostvars, "ActiveState") == "active"
        assert show(hostvars, "UnitFileState") == "enabled"
        assert show(hostvars, "User") == "vllm"
        assert serving(hostvars, port_of(inventory, host))
        unit = on(hostvars, f"cat /etc/systemd/system/{NAME}.service")
        assert "PrivateDevices" not in unit and "bash -c" not in unit
        assert on(hostvars, f"cat {LAST_GOOD}/{NAME}.service") == unit
        exposure = on(hostvars, f"systemd-analyze security {NAME}.service | tail -1")
        print(f"{host}: {exposure}")
        assert float(exposure.split("service:")[1].split()[0]) <= 4.0


def test_second_run_changes_and_restarts_nothing(converged, inventory, hosts):
    # The no-op path (one read-only call and /health per host), then the full path it stands
    # in for (every file, unit and the gate), then the full path in check mode.
    full = {"acceldeploy_full_check": True}
    for extra in ({}, full):
        run = run_playbook(PLAYBOOK, inventory, extra, timeout=900)
        assert run.ok, run.output
        print(f"second run {extra}: {run.duration:.0f}s")
        assert run.drift() == ({} if extra else {h: [] for h in hosts})
        assert bool(run.results("Files | Units")) == bool(extra)
        for host, hostvars in hosts.items():
            assert run.changed(host) == 0, [
                (t, h) for t, h, r in run.iter_results() if h == host and r.get("changed")
            ]
            assert run.results("Gate | /health answers 200")[host]["results"][0]["status"] == 200
            assert show(hostvars, "MainPID") == converged["pids"][host]
    check = run_playbook(PLAYBOOK, inventory, full, check=True, diff=True, timeout=900)
    assert check.ok, check.output
    assert all(check.changed(h) == 0 for h in hosts)
    # A hand edit is drift: found by that one call, repaired by the role's full path (the
    # rollback copy: no restart needed), on that host only.
    host, hostvars = next(iter(hosts.items()))
    on(hostvars, f"echo '# edited' >> {LAST_GOOD}/{NAME}.service")
    repaired = run_playbook(PLAYBOOK, inventory, timeout=900)
    assert repaired.ok, repaired.output
    assert repaired.drift() == {
        h: [f"{LAST_GOOD}/{NAME}.service changed"] if h == host else [] for h in hosts
    }
    unit = on(hostvars, f"cat /etc/systemd/system/{NAME}.service")
    assert on(hostvars, f"cat {LAST_GOOD}/{NAME}.service") == unit
    assert repaired.changed(host) == 1 and show(hostvars, "MainPID") == converged["pids"][host]


def restarted(hostvars: dict, old_pid: str) -> bool:
    return wait_for(
        lambda: (
            show(hostvars, "ActiveState") == "active"
            and show(hostvars, "MainPID") not in ("0", old_pid)
        ),
        240,
    )


def test_killed_vllm_is_restarted(converged, inventory, hosts):
    host, hostvars = next(iter(hosts.items()))
    old = show(hostvars, "MainPID")
    restarts = int(show(hostvars, "NRestarts"))
    started = time.monotonic()
    on(hostvars, f"kill -9 {old}")
    assert restarted(hostvars, old)
    print(f"restart after kill: {time.monotonic() - started:.0f}s")
    assert int(show(hostvars, "NRestarts")) == restarts + 1
    assert serving(hostvars, port_of(inventory, host))


def test_a_dead_engine_restarts_the_service(converged, inventory, hosts):
    """The OOM killer's usual victim is the engine core, the biggest process. vLLM 0.12's API
    server then shuts down and exits 0, so only `Restart=always` brings the service back."""
    host, hostvars = list(hosts.items())[-1]
    old = show(hostvars, "MainPID")
    restarts = int(show(hostvars, "NRestarts"))
    on(hostvars, f"pkill -KILL -P {old} -f VLLM::EngineCore")
    assert restarted(hostvars, old)
    assert int(show(hostvars, "NRestarts")) == restarts + 1
    journal = on(hostvars, f"journalctl _PID={old} -o cat --no-pager")
    assert "EngineDeadError" in journal and "Finished server process" in journal
    assert serving(hostvars, port_of(inventory, host))


@pytest.mark.slow  # ~5 min: two models+serve round trips and a check-mode preview
def test_new_model_revision_switches_then_the_old_is_pruned(converged, inventory, hosts, tmp_path):
    """The served model at its commit id instead of `main` on the host that pulls from the
    seed: models.yml publishes the new revision beside the old, serve switches that host and,
    only once its gate passed, removes the old revision there (vllm_service_model_keep 0).
    The seed keeps both (it feeds the other host) and keeps serving. Back to `main`: the same
    the other way."""
    from huggingface_hub import HfApi

    seed, host = list(hosts)[:2]
    (spec,) = service_spec(inventory, host)
    endpoint = host_vars(str(inventory), host)["model_weights_hf_endpoint"]
    commit = HfApi(endpoint=endpoint).model_info(spec["model"], revision=spec["revision"]).sha
    old, new = (f"/models/{spec['model']}@{rev}" for rev in (spec["revision"], commit))
    switch = overlay(inventory, tmp_path, {
        host: {"acceldeploy_services": service_spec(inventory, host, revision=commit)}})  # fmt: skip
    stages = tmp_path / "models-and-serve.yml"
    stages.write_text("".join(f"- name: {stage}\n  ansible.builtin.import_playbook: {REPO}/"
                              f"playbooks/{stage}.yml\n" for stage in ("models", "serve")))  # fmt: skip
    seed_pid = show(hosts[seed], "MainPID")
    # --check --diff says what would switch, and changes nothing
    preview = run_playbook(stages, switch, check=True, diff=True, timeout=900)
    assert preview.ok, preview.output
    (said,) = [r["msg"] for n, h, r in preview.iter_results()
               if h == host and "would switch (check mode)" in n and "msg" in r]  # fmt: skip
    assert said == [f"{NAME}: model {old} -> {new}"], said
    assert on(hosts[host], f"ls -d /models/{spec['model']}@*") == old
    back = False
    try:
        for target, served, gone in ((switch, new, old), (inventory, old, new)):
            run = run_playbook(stages, target, {"vllm_service_model_keep": 0}, timeout=900)
            assert run.ok, run.output
            steps = [(name, result) for name, h, result in run.iter_results() if h == host]
            gate = max(i for i, (name, _) in enumerate(steps) if "Gate |" in name)
            (prune,) = [i for i, (name, _) in enumerate(steps) if "Prune | Model revisions" in name]
            assert gate < prune and steps[prune][1]["removed"] == [gone], steps[prune]
            argv = on(hosts[host], f"tr '\\0' ' ' < /proc/{show(hosts[host], 'MainPID')}/cmdline")
            assert f" {served} " in f" {argv} ", argv
            assert serving(hosts[host], port_of(target, host))
            assert on(hosts[host], f"ls -d /models/{spec['model']}@*").split() == [served]
            assert sorted(on(hosts[seed], f"ls -d {old} {new}").split()) == sorted([old, new])
            assert show(hosts[seed], "MainPID") == seed_pid
            back = target == inventory
    finally:
        if not back:  # stopped half-way: the host serves `main` again for the tests after this
            run_playbook(stages, inventory, timeout=900)
        # the seed fetched the commit for the other host only: not this test's to leave
        on(hosts[seed], f"rm -rf {new}")


def test_retune_restart_drains_the_requests_in_flight(converged, inventory, hosts, tmp_path):
    """A retune (an env change, and the balancer hooks) restarts the first host while two
    clients keep long completions running on it. The drain hook marks the host drained (what
    a balancer would watch): the clients stop sending; the unit's ExecStop (vllm-drain) waits
    for the requests in flight, so every one completes whole; the ready hook clears the mark.
    The other host answers every request throughout."""
    (host, hostvars), (other, _) = list(hosts.items())[:2]
    port, other_port = port_of(inventory, host), port_of(inventory, other)
    old_pid = show(hostvars, "MainPID")
    mark = f"/run/acceldeploy-test-drained-{NAME}"
    body = {"model": NAME, "prompt": "Hello", "max_tokens": DRAIN_TOKENS, "ignore_eos": True}
    drained, stop = threading.Event(), threading.Event()
    answers: list[tuple[Any, Any, str]] = []
    other_answers: list[int] = []
    ran: dict[str, Any] = {}
    retune = overlay(inventory, tmp_path, {host: {
        "acceldeploy_services": service_spec(inventory, host, env={"RETUNE": "1"}),
        "vllm_service_drain_hook": "/usr/bin/touch /run/acceldeploy-test-drained-%N",
        "vllm_service_ready_hook": "/usr/bin/rm -f /run/acceldeploy-test-drained-%N",
        # room for a CI machine where the lab generates several times slower than here
        "vllm_service_drain_timeout": 600,
    }})  # fmt: skip

    def client(delay: float) -> None:
        time.sleep(delay)
        while not drained.is_set():
            sent = time.monotonic()
            try:
                status, raw = http(f"http://127.0.0.1:{port}/v1/completions", body, 900)
            except OSError as exc:  # the connection cut: what draining prevents
                status, raw = str(exc), b"{}"
            usage = json.loads(raw or b"{}").get("usage", {})
            answers.append((status, usage, f"{time.monotonic() - sent:.0f}s"))

    def balancer() -> None:
        while not stop.is_set() and not drained.is_set():
            if ssh(hostvars, f"test -e {mark}", timeout=30).returncode == 0:
                drained.set()
            time.sleep(0.2)

    def keep_asking_the_other_host() -> None:
        while not stop.is_set():
            try:
                status, _ = http(f"http://127.0.0.1:{other_port}/v1/completions",
                                 {"model": NAME, "prompt": "Hi", "max_tokens": 2}, 60)  # fmt: skip
            except OSError:
                status = -1
            other_answers.append(status)
            time.sleep(0.5)

    def playbook() -> None:
        ran["run"] = run_playbook(PLAYBOOK, retune, timeout=900)

    # two clients half a request apart: one is always in the middle of a long completion
    threads = [threading.Thread(target=client, args=(0,)), threading.Thread(target=client, args=(6,)),
               threading.Thread(target=balancer), threading.Thread(target=keep_asking_the_other_host)]  # fmt: skip
    for thread in threads:
        thread.start()
    try:
        playbook()
    finally:
        drained.set()
        stop.set()
        for thread in threads:
            thread.join(timeout=900)
    run = ran["run"]
    assert run.ok, run.output
    journal = on(hostvars, f"journalctl -u {NAME} -o cat --no-pager -n 400 | grep vllm-drain")
    print(f"long completions: {answers}; other host: {len(other_answers)} answers\n{journal}")
    assert answers and all(status == 200 for status, _, _ in answers), (answers, journal)
    assert all(usage.get("completion_tokens") == DRAIN_TOKENS for _, usage, _ in answers), answers
    assert show(hostvars, "MainPID") != old_pid and "RETUNE=1" in show(hostvars, "Environment")
    found = re.findall(r"vllm-drain: drained (\d+) request\(s\)", journal)
    assert found and int(found[-1]) >= 1, journal
    assert ssh(hostvars, f"test -e {mark}", timeout=30).returncode != 0  # the ready hook ran
    assert other_answers and set(other_answers) == {200}, other_answers


def bad_flag(inventory: Path, tmp_path: Path, hosts: dict[str, Any]) -> Path:
    """The first host gets a harmless env change, the last a flag vLLM's parser accepts but the
    server fails on when it loads the tokenizer."""
    first, last = next(iter(hosts)), list(hosts)[-1]
    return overlay(inventory, tmp_path, {
        first: {"acceldeploy_services": service_spec(inventory, first, env={"ROLL": "1"})},
        last: {"acceldeploy_services": service_spec(
            inventory, last, extra_args={"tokenizer": "/nonexistent/tokenizer"})},
    })  # fmt: skip


def test_bad_flag_on_last_host_stops_the_rollout_there(converged, inventory, hosts, tmp_path):
    first, last = next(iter(hosts)), list(hosts)[-1]
    good_unit = on(hosts[last], f"cat /etc/systemd/system/{NAME}.service")
    first_unit = on(hosts[first], f"cat /etc/systemd/system/{NAME}.service")
    # acceldeploy_rollback_all: the first host (switched by an earlier batch, with ROLL=1)
    # goes back too, to what this run replaced there
    run = run_playbook(PLAYBOOK, bad_flag(inventory, tmp_path, hosts),
                       {"acceldeploy_rollback_all": True}, timeout=900)  # fmt: skip
    assert not run.ok
    assert run.failed(last) == 1 and run.failed(first) == 0
    assert f"did not become ready on {last}" in run.output, run.output
    # the failed host went back to its last good unit by itself and serves again; the report
    # names it, the cause (the journal) and the host an earlier batch had switched, back too
    assert f"Rolled back on {last}: {NAME} serve again" in run.output, run.output
    assert (f"Rolled back too (acceldeploy_rollback_all): {first}: {NAME} serves again on what "
            "this run replaced") in run.output and "Journal: " in run.output, run.output  # fmt: skip
    assert on(hosts[last], f"cat /etc/systemd/system/{NAME}.service") == good_unit
    assert serving(hosts[last], port_of(inventory, last))
    assert on(hosts[last], f"cat {LAST_GOOD}/{NAME}.service") == good_unit
    assert on(hosts[first], f"cat /etc/systemd/system/{NAME}.service") == first_unit
    assert on(hosts[first], f"cat {LAST_GOOD}/{NAME}.service") == first_unit
    assert "ROLL=1" not in on(hosts[first], f"systemctl show -p Environment --value {NAME}")
    assert serving(hosts[first], port_of(inventory, first))


@pytest.mark.slow  # ~4 min: a rollout, the crash loop up to its start limit, a fixing re-run
def test_without_rollback_the_crash_loop_stops_at_the_start_limit(
    converged, inventory, hosts, tmp_path
):
    first, last = next(iter(hosts)), list(hosts)[-1]
    # with vllm_service_rollback: false the failed host is left as it is, and (by default) the
    # host an earlier batch switched stays switched and is named
    run = run_playbook(PLAYBOOK, bad_flag(inventory, tmp_path, hosts),
                       {"vllm_service_rollback": False}, timeout=900)  # fmt: skip
    assert not run.ok and run.failed(last) == 1, run.output
    assert f"{last} was not rolled back" in run.output, run.output
    assert f"serving the new units: {first} (left as they are" in run.output, run.output
    assert serving(hosts[first], port_of(inventory, first))  # restarted with ROLL=1, serving
    assert "ROLL=1" in on(hosts[first], f"systemctl show -p Environment --value {NAME}")
    # the crash loop stops at the start limit (StartLimitBurst=3) and stays failed
    assert wait_for(lambda: show(hosts[last], "ActiveState") == "failed", 300, 5)
    restarts = show(hosts[last], "NRestarts")
    status = ssh(hosts[last], f"systemctl status {NAME} --no-pager", timeout=30).stdout
    assert "Active: failed" in status
    journal = on(hosts[last], f"journalctl -u {NAME} --no-pager -o cat -n 200")
    assert "Start request repeated too quickly" in journal
    time.sleep(15)  # > RestartSec: no further attempt
    assert show(hosts[last], "NRestarts") == restarts
    assert show(hosts[last], "ActiveState") == "failed"

    fixed = run_playbook(PLAYBOOK, inventory, both_at_once(hosts), timeout=1200)
    assert fixed.ok, fixed.output
    for host, hostvars in hosts.items():
        assert serving(hostvars, port_of(inventory, host))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        # a flag the recorded option list accepts but vLLM's own checks refuse on the host
        ({"extra_args": {"enable-auto-tool-choice": True}}, "requires --tool-call-parser"),
        ({"tensor_parallel_size": 2, "devices": [0]}, "tensor_parallel_size is 2"),
        ({"max_model_len": 1000000}, "exceeds the model's max_position_embeddings 8192"),
        ("two-services-one-port", "is also acceldeploy_services[0] (qwen3-vl).port"),
    ],
    ids=["vllm-parser", "tp-vs-devices", "too-long", "port-twice"],
)
def test_bad_input_fails_before_any_host_changes(converged, inventory, hosts, change, says):
    (spec,) = service_spec(inventory, next(iter(hosts)))
    if change == "two-services-one-port":
        services = [spec, {**spec, "name": "qwen3-vl-b"}]
    else:
        services = [{**spec, **change}]
    pids = {h: show(v, "MainPID") for h, v in hosts.items()}
    run = run_playbook(PLAYBOOK, inventory, {"acceldeploy_services": services}, timeout=600)
    assert not run.ok
    assert says in run.output, run.output
    for host, hostvars in hosts.items():
        assert run.changed(host) == 0
        assert show(hostvars, "MainPID") == pids[host]
