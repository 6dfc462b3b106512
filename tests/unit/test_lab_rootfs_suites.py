"""The lab's Debian suites: per-suite package lists, sources, recipe digests and the rootfs
build around debootstrap (faked), host specs, status and inventory. No root, no network."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acceldeploy_lab import hosts, rootfs
from acceldeploy_lab.inventory import InventoryHost, read_inventory, write_inventory

ROOT = Path(__file__).resolve().parents[2]
BOOKWORM, BULLSEYE, TRIXIE = (rootfs.SUITES[name] for name in ("bookworm", "bullseye", "trixie"))
# The digest of the bookworm rootfs built before the lab knew other suites: a change rebuilds
# every cached bookworm rootfs and restarts every kept bookworm host fresh.
BOOKWORM_DIGEST = "4f36ec0b31adb607b60ac9ca9a7640084a4b7693b6674acfcf0ffe9bc03fe496"
DEBOOTSTRAPPED_DIRS = ("etc/ssh", "etc/systemd/system", "root", "var/cache/apt/archives")


def test_suites_in_order_with_their_releases():
    assert [(s.name, s.release) for s in rootfs.SUITES.values()] == [
        ("bookworm", "Debian 12"),
        ("bullseye", "Debian 11"),
        ("trixie", "Debian 13"),
    ]
    assert rootfs.DEFAULT_SUITE is BOOKWORM


def test_bookworm_recipe_is_the_one_already_cached():
    assert rootfs.recipe_digest(BOOKWORM) == BOOKWORM_DIGEST


def test_each_suite_has_its_own_digest():
    digests = {rootfs.recipe_digest(s) for s in rootfs.SUITES.values()}
    assert len(digests) == len(rootfs.SUITES)


@pytest.mark.parametrize("suite", rootfs.SUITES.values(), ids=lambda s: s.name)
def test_packages_are_the_common_set_plus_a_cpufreq_tool(suite):
    assert len(set(suite.packages)) == len(suite.packages)
    assert set(rootfs.COMMON_PACKAGES) <= set(suite.packages)
    extra = set(suite.packages) - set(rootfs.COMMON_PACKAGES)
    assert extra == ({"linux-cpupower"} if suite is TRIXIE else {"cpufrequtils"})


@pytest.mark.parametrize("suite", rootfs.SUITES.values(), ids=lambda s: s.name)
def test_sources_list_main_updates_and_security(suite):
    lines = rootfs.sources_list(suite, "http://mirror.example/debian").splitlines()
    assert lines == [
        f"deb http://mirror.example/debian {suite.name} main",
        f"deb http://mirror.example/debian {suite.name}-updates main",
        f"deb http://deb.debian.org/debian-security {suite.name}-security main",
    ]


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(rootfs.RootfsError, match="bookworm, bullseye, trixie"):
        rootfs.suite_named("sid")


def test_each_suite_has_its_own_rootfs_dir(tmp_path):
    paths = {rootfs.rootfs_path(tmp_path, s) for s in rootfs.SUITES.values()}
    assert paths == {tmp_path / "rootfs" / name for name in rootfs.SUITES}


def test_configure_writes_the_suites_sources_masks_and_stamp(tmp_path):
    for rel in DEBOOTSTRAPPED_DIRS:
        (tmp_path / rel).mkdir(parents=True)
    rootfs.configure(tmp_path, BULLSEYE, "http://mirror.example/debian")
    sources = (tmp_path / "etc/apt/sources.list").read_text()
    assert "bullseye-security main" in sources
    for unit in rootfs.MASKED_UNITS:
        assert (tmp_path / "etc/systemd/system" / unit).readlink() == Path("/dev/null")
    stamp = json.loads((tmp_path / rootfs.STAMP).read_text())
    assert stamp["suite"] == "bullseye"
    assert rootfs.is_current(tmp_path, BULLSEYE)
    assert not rootfs.is_current(tmp_path, BOOKWORM)


def fake_debootstrap(calls):
    def run(suite, target, debs, mirror_url, log, stop=None):
        calls.append((suite.name, debs, log))
        for rel in DEBOOTSTRAPPED_DIRS:
            (target / rel).mkdir(parents=True)

    return run


def test_ensure_rootfs_builds_each_suite_once_in_its_own_place(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(rootfs, "_debootstrap", fake_debootstrap(calls))
    for suite in (TRIXIE, BULLSEYE, TRIXIE):
        built = rootfs.ensure_rootfs(tmp_path, suite, say=lambda _message: None)
        assert built == tmp_path / "rootfs" / suite.name
        assert rootfs.is_current(built, suite)
    base = tmp_path / "rootfs"
    assert calls == [
        ("trixie", base / "debs/trixie", base / "debootstrap-trixie.log"),
        ("bullseye", base / "debs/bullseye", base / "debootstrap-bullseye.log"),
    ]
    assert sorted(p.name for p in base.iterdir() if p.name.startswith(".")) == [
        ".lock-bullseye",
        ".lock-trixie",
    ]


def test_a_build_in_a_worker_thread_stops_when_the_prepare_gives_up(tmp_path, monkeypatch):
    """stack.prepare builds the trees in threads, which see no SIGTERM: its stop event ends
    the debootstrap's whole process group within a second or so."""
    import threading
    import time

    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin/debootstrap"
    script.write_text('#!/bin/sh\necho $$ > "$0.pid"\nsleep 60\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    started = time.monotonic()
    with pytest.raises(rootfs.RootfsError, match="stopped"):
        rootfs._debootstrap(
            TRIXIE, tmp_path / "t", tmp_path, "http://127.0.0.1:9/", tmp_path / "log", stop
        )
    assert time.monotonic() - started < 5
    pid = int((tmp_path / "bin/debootstrap.pid").read_text())
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def test_prepare_builds_the_trees_beside_the_stack_and_stops_them_when_it_fails(monkeypatch):
    import threading

    from acceldeploy_lab import stack

    building = threading.Barrier(3, timeout=5)  # both trees and the stack at once

    told_to_stop = []

    def tree(cache, suite, say, stop):
        building.wait()
        told_to_stop.append(stop.wait(5))
        raise rootfs.RootfsError("debootstrap stopped")

    def failing_stack(cache):
        building.wait()
        raise OSError("wheels: no space left on device")

    monkeypatch.setattr(rootfs, "ensure_rootfs", tree)
    monkeypatch.setattr(stack, "_serving_stack", failing_stack)
    with pytest.raises(OSError, match="no space"):
        stack.prepare(Path("/nonexistent"), [TRIXIE, BULLSEYE])
    assert told_to_stop == [True, True]


def host_spec(tmp_path, suite):
    return hosts.HostSpec(
        name="lab2",
        index=2,
        ssh_port=2202,
        lower=rootfs.rootfs_path(tmp_path, suite),
        data=tmp_path / "lab/lab2",
        run=tmp_path / "run/lab2",
        suite=suite,
    )


def test_host_spec_records_its_suite(tmp_path):
    spec = host_spec(tmp_path, TRIXIE)
    spec.run.mkdir(parents=True)
    spec.spec_file.write_text(spec.to_json())
    assert hosts.HostSpec.load(spec.run) == spec


def test_host_spec_written_before_suites_is_bookworm(tmp_path):
    spec = host_spec(tmp_path, BOOKWORM)
    spec.run.mkdir(parents=True)
    data = json.loads(spec.to_json())
    del data["suite"]
    spec.spec_file.write_text(json.dumps(data))
    assert hosts.HostSpec.load(spec.run).suite is BOOKWORM


def test_kept_state_tells_its_suite(tmp_path):
    paths = hosts.LabPaths(state=tmp_path / "run", cache=tmp_path)
    paths.data_dir("lab1").mkdir(parents=True)
    (paths.data_dir("lab1") / "rootfs.digest").write_text(rootfs.recipe_digest(BULLSEYE))
    assert hosts.kept_suite(paths, "lab1") == "bullseye"
    assert hosts.kept_suite(paths, "lab2") == "-"


def test_status_shows_the_suite():
    rows = [
        hosts.HostStatus("lab1", "running", 2201, "b1", "running", "bookworm"),
        hosts.HostStatus("lab2", "stopped", None, suite="trixie"),
    ]
    table = hosts.format_status(rows).splitlines()
    assert table[0].split() == ["HOST", "SUITE", "STATE", "SSH", "BOOT", "ID", "SYSTEM"]
    assert table[1].split() == ["lab1", "bookworm", "running", "127.0.0.1:2201", "b1", "running"]
    assert table[2].split() == ["lab2", "trixie", "stopped", "-", "-", "-"]


def test_inventory_gives_each_host_its_suite(tmp_path):
    hosts_in = [InventoryHost("lab1", 1, 2201), InventoryHost("lab2", 2, 2202, "trixie")]
    path = write_inventory(tmp_path / "hosts.yml", hosts_in, Path("/run/key"))
    entries = read_inventory(path)
    assert {name: v["lab_suite"] for name, v in entries.items()} == {
        "lab1": "bookworm",
        "lab2": "trixie",
    }
    assert entries["lab2"]["lab_index"] == 2


def lab_up(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "tools/lab.py"), "up", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_up_refuses_hosts_with_suites():
    result = lab_up("--hosts", "2", "--suites", "bookworm,trixie")
    assert result.returncode == 2
    assert "--suites: not allowed with argument --hosts" in result.stderr


def test_up_refuses_an_unknown_suite():
    result = lab_up("--suites", "bookworm,sid")
    assert result.returncode == 2
    assert "unknown Debian suite 'sid'" in result.stderr
