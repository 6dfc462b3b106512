"""acceldeploy the way a user outside this repository installs it: the wheel (`pip wheel`) into
a fresh venv in an empty directory, the collection tarball (`ansible-galaxy collection build`)
installed with that venv's ansible-galaxy. No checkout on any path, nothing editable. There:
`acceldeploy plan render` reads a copy of an example inventory, and a three-line playbook that
imports acceldeploy.fleet.site runs against the converged lab with a copy of its inventory; it
completes (verify included, run by the venv's own package), and a second run changes nothing.
Run after test_site.py (the served lab). The same from bare hosts (freshly started, nothing
deployed) is `make test-slow`'s: it leaves the lab served by the installed collection."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_run import REPO, run_playbook
from labhost import INVENTORY, lab_cli

from acceldeploy import __version__
from acceldeploy.downloads import wheelhouse
from standalone_build import build_wheel, run

pytestmark = pytest.mark.e2e

PLAYBOOK = """---
- name: The fleet, from the installed collection
  ansible.builtin.import_playbook: acceldeploy.fleet.site
"""
# A user's own ansible.cfg: nothing of the repository's.
CONFIG = """\
[defaults]
interpreter_python = auto_silent
retry_files_enabled = false
forks = 20
gathering = smart

[ssh_connection]
pipelining = true
ssh_args = -o ControlMaster=auto -o ControlPersist=120s -o ServerAliveInterval=30
"""


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """<tmp>/venv with the wheel, <tmp>/collections with the tarball, <tmp>/work: the user's."""
    tmp = tmp_path_factory.mktemp("standalone")
    assert not tmp.resolve().is_relative_to(REPO)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{tmp / 'venv' / 'bin'}:/usr/bin:/bin"
    dist = build_wheel(tmp, env).parent
    run([Path(sys.executable).parent / "ansible-galaxy", "collection", "build",
         "--output-path", dist, REPO], tmp, env)  # fmt: skip
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", venv], tmp, env)
    # The controller's wheels a bundle keeps, when this machine has them; else the index.
    kept = sorted((wheelhouse.cache_dir() / "controller-wheels").glob("cp*"))
    links = [arg for d in kept for arg in ("--find-links", str(d))]
    run([venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", "--find-links",
         dist, *links, f"acceldeploy=={__version__}"], tmp, env, timeout=1800)  # fmt: skip
    (tarball,) = dist.glob("acceldeploy-fleet-*.tar.gz")
    collections = tmp / "collections"
    work = tmp / "work"
    work.mkdir()
    (work / "ansible.cfg").write_text(CONFIG)
    (work / "site.yml").write_text(PLAYBOOK)
    env |= {
        "ANSIBLE_CONFIG": str(work / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
    }
    run([venv / "bin" / "ansible-galaxy", "collection", "install", "-p", collections, tarball],
        work, env)  # fmt: skip
    shutil.copytree(INVENTORY.parent, work / "inventory")
    shutil.copytree(REPO / "inventory" / "examples" / "gaudi2", work / "gaudi2")
    yield {"venv": venv, "work": work, "env": env, "collections": collections}  # type: ignore[misc]


def test_nothing_of_the_checkout_is_used(outside: dict) -> None:
    python = outside["venv"] / "bin" / "python"
    probe = "import acceldeploy, json, sys; print(json.dumps([acceldeploy.__file__, sys.path]))"
    where, path = json.loads(run([python, "-c", probe], outside["work"], outside["env"]))
    assert Path(where).is_relative_to(outside["venv"]), where
    assert not [p for p in path if p and Path(p).resolve().is_relative_to(REPO)], path
    editable = run([outside["venv"] / "bin" / "pip", "list", "--editable", "--format", "json"],
                   outside["work"], outside["env"])  # fmt: skip
    assert json.loads(editable) == []
    tree = outside["collections"] / "ansible_collections" / "acceldeploy" / "fleet"
    assert not list(tree.rglob("acceldeploy_lab")) and not (tree / "lab").exists()


def test_plan_render_reads_a_copy_of_an_example_inventory(outside: dict) -> None:
    out = run([outside["venv"] / "bin" / "acceldeploy", "plan", "render", "-i",
               outside["work"] / "gaudi2"], outside["work"], outside["env"])  # fmt: skip
    assert out.startswith("# qwen2-5-vl on hpu-01 (gaudi); KV: "), out[:2000]
    assert "HABANA_VISIBLE_MODULES=0" in out and " serve " in out, out[-2000:]


def test_a_playbook_importing_acceldeploy_fleet_site_converges_the_lab_and_reruns_clean(
    outside: dict,
) -> None:
    playbook = outside["work"] / "site.yml"
    command = outside["venv"] / "bin" / "ansible-playbook"
    inventory = outside["work"] / "inventory"
    kwargs = {"env": outside["env"], "cwd": outside["work"], "command": command, "timeout": 3000}
    first = run_playbook(playbook, inventory, **kwargs)
    assert first.ok, first.output[-6000:]
    assert first.results("Run acceldeploy verify against this inventory")
    again = run_playbook(playbook, inventory, **kwargs)
    assert again.ok, again.output[-6000:]
    assert {h: again.changed(h) for h in again.stats} == dict.fromkeys(again.stats, 0)
    print(f"\nfrom the installed collection: {first.duration:.1f} s, rerun {again.duration:.1f} s",
          flush=True)  # fmt: skip


@pytest.mark.slow  # ~5 min: two bare hosts to serving, the environment built from the wheels
def test_from_bare_hosts_the_installed_collection_serves_and_reruns_clean(outside: dict) -> None:
    lab_cli("down")
    lab_cli("up", "--hosts", "2")
    inventory = outside["work"] / "bare"
    shutil.copytree(INVENTORY.parent, inventory)
    playbook, command = outside["work"] / "site.yml", outside["venv"] / "bin" / "ansible-playbook"
    kwargs = {"env": outside["env"], "cwd": outside["work"], "command": command, "timeout": 3000}
    first = run_playbook(playbook, inventory, **kwargs)
    assert first.ok, first.output[-6000:]
    assert all(first.changed(h) > 0 for h in ("lab1", "lab2")), first.stats
    assert first.results("Run acceldeploy verify against this inventory")
    again = run_playbook(playbook, inventory, **kwargs)
    assert again.ok, again.output[-6000:]
    assert {h: again.changed(h) for h in again.stats} == dict.fromkeys(again.stats, 0)
    print(f"\nfrom bare, the installed collection: {first.duration:.1f} s, rerun "
          f"{again.duration:.1f} s", flush=True)  # fmt: skip
