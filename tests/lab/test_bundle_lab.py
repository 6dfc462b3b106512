"""The offline bundle on the lab's real downloads (issue "Day 0 on an air-gapped rack"): built
from inventory/lab on the warm cache (the wheels are hard links, the model comes through the
lab's mirror), verified, a flipped byte named by `bundle verify` and by preflight, a bundle
missing one host class refused by preflight; each refusal before any host is contacted.

The isolated deploy from bare and the 2-vs-4-host measurement are in test_bundle_isolated.py
(make test-slow)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_run import REPO, run_playbook
from labhost import INVENTORY

pytestmark = pytest.mark.lab

PREFLIGHT = "Preflight - check the inventory before changing any host"


def acceldeploy(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acceldeploy", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "lab"
    built = acceldeploy("bundle", "build", "-i", str(INVENTORY), "--out", str(out), "--json")
    assert built.returncode == 0, built.stderr
    summary = json.loads(built.stdout)
    assert summary["classes"] == ["cpu-cp311-x86_64-glibc2.36"]
    assert summary["models"] == ["acceldeploy/tiny-qwen3-vl@main"]
    assert summary["bytes"] > 4e9
    return out


def flipped(source: Path, tmp: Path) -> Path:
    """A copy of the bundle (hard links: the cache's wheels are never written through) with one
    byte of one stack wheel flipped in a file of its own."""
    copy = tmp / source.name
    shutil.copytree(source, copy, copy_function=os.link)
    wheel = next(copy.glob("wheels/six-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    wheel.unlink()
    wheel.write_bytes(bytes(data))
    return copy


def closed_port_inventory(tmp: Path, **changes: object) -> Path:
    """inventory/lab with every host at a closed port: a run that tried to contact one would
    report it unreachable, not the refusal under test."""
    data = yaml.safe_load(INVENTORY.read_text())
    for host in data["all"]["children"]["lab"]["hosts"].values():
        host.update(ansible_host="127.0.0.1", ansible_port=1)
    for name, values in changes.items():
        data["all"]["children"]["lab"]["hosts"][name].update(values)
    directory = tmp / "inventory"
    shutil.copytree(INVENTORY.parent, directory)
    (directory / "hosts.yml").write_text(yaml.safe_dump(data))
    return directory


def refusals(run) -> list[str]:
    plays = [str((p.get("play") or {}).get("name") or "") for p in run.data.get("plays") or []]
    assert plays == [PREFLIGHT], plays
    unreachable = [h for h, c in run.stats.items() if c.get("unreachable")]
    assert not unreachable, f"contacted: {unreachable}"
    return [str(r.get("msg", "")) for _, _, r in run.iter_results() if r.get("failed")]


def test_build_is_resumable_and_verify_rehashes(bundle: Path) -> None:
    again = acceldeploy("bundle", "build", "-i", str(INVENTORY), "--out", str(bundle))
    assert again.returncode == 0, again.stderr
    assert "(0 new)" in again.stderr
    verified = acceldeploy("bundle", "verify", str(bundle))
    assert verified.returncode == 0, verified.stdout
    assert ": intact (" in verified.stdout


def test_a_flipped_byte_is_named_by_verify_and_by_preflight(bundle: Path, tmp_path: Path) -> None:
    damaged = flipped(bundle, tmp_path)
    verified = acceldeploy("bundle", "verify", str(damaged))
    assert verified.returncode == 1
    assert "BAD  wheels/six-1.17.0-py2.py3-none-any.whl: sha256" in verified.stdout
    run = run_playbook(
        "site.yml",
        closed_port_inventory(tmp_path),
        extra_vars={"acceldeploy_bundle": str(damaged)},
        timeout=600,
    )
    assert not run.ok
    (failed,) = refusals(run)
    assert f"the bundle {damaged} is damaged: wheels/six-1.17.0-py2.py3-none-any.whl" in failed
    assert "acceldeploy bundle build -i" in failed


def test_a_missing_host_class_is_named_with_the_command(bundle: Path, tmp_path: Path) -> None:
    """lab2 declared Debian 13 (CPython 3.13): the bundle, built for Debian 12, lacks that
    class's wheels; preflight names the class, the host and the command that adds them."""
    inventory = closed_port_inventory(
        tmp_path,
        lab2={"acceldeploy_os": "debian-13", "python_env_venv_python": "/usr/bin/python3.13"},
    )
    run = run_playbook(
        "site.yml", inventory, extra_vars={"acceldeploy_bundle": str(bundle)}, timeout=600
    )
    assert not run.ok
    (failed,) = refusals(run)
    assert "no serving-stack wheels for host class cpu-cp313-x86_64-glibc2.41 (lab2)" in failed
    assert f"`acceldeploy bundle build -i {inventory} --out {bundle}`" in failed


def test_diff_of_an_upgrade(bundle: Path, tmp_path: Path) -> None:
    newer = tmp_path / "newer"
    shutil.copytree(bundle, newer, copy_function=os.link)
    data = json.loads((newer / "bundle.json").read_text())
    dropped = next(n for n in data["files"] if n.startswith("wheels/six-"))
    del data["files"][dropped]
    (newer / "bundle.json").unlink()  # a hard link to the original: never written through
    (newer / "bundle.json").write_text(json.dumps(data))
    shown = acceldeploy("bundle", "diff", str(bundle), str(newer))
    assert shown.returncode == 0, shown.stderr
    assert f"  - {dropped}" in shown.stdout
    assert shown.stdout.startswith("files: +0 -1 ~0")
