"""The acceldeploy wheel stands alone: built from the repository and installed into a fresh venv
in a temporary directory, it plans a copy of an example inventory, lists the stacks, renders a
unit from the vllm_service templates it carries, and writes its own wheel for a bundle
(acceldeploy.bundle.ownwheel) that installs and runs again. The venv gets its dependencies
from the worktree's .venv through a .pth file (no network), a directory that holds no
acceldeploy; no other path of the repository is on its sys.path. From the checkout (the
editable install of `make venv`) the bundle's own wheel is built by pip from that checkout."""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

import acceldeploy
from acceldeploy.bundle import build, ownwheel
from acceldeploy.downloads import wheelhouse
from standalone_build import PACKAGE, ROOT, build_wheel, run

DEPENDENCIES = Path(sysconfig.get_paths()["purelib"])
EXAMPLE = "gaudi2"


def dependencies() -> list[str]:
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def fresh_venv(where: Path, wheel: Path, env: dict[str, str]) -> Path:
    """A venv with ``wheel`` installed and the worktree's dependencies visible; its python."""
    run([sys.executable, "-m", "venv", "--without-pip", where], where.parent, env)
    python = where / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  where.parent, env).strip()  # fmt: skip
    (Path(purelib) / "worktree-dependencies.pth").write_text(f"{DEPENDENCIES}\n")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
         "--no-index", "--force-reinstall", wheel], where.parent, env)  # fmt: skip
    return python


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The wheel (standalone_build.build_wheel), installed into <tmp>/venv."""
    tmp = tmp_path_factory.mktemp("standalone")
    assert not tmp.resolve().is_relative_to(ROOT)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "ACCELDEPLOY_", "PYTHON"))}  # fmt: skip
    env.update(ANSIBLE_HOME=str(tmp / "ansible"), ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"))
    wheel = build_wheel(tmp, env)
    python = fresh_venv(tmp / "venv", wheel, env)
    inventory = tmp / "inventory"
    shutil.copytree(ROOT / "inventory" / "examples" / EXAMPLE, inventory)
    return {"tmp": tmp, "env": env, "wheel": wheel, "python": python, "inventory": inventory}


def test_the_wheel_holds_every_data_file_of_the_package(installed) -> None:
    names = set(members(installed["wheel"]))
    shipped = (PACKAGE / "data").rglob("*"), (PACKAGE / "skeletons").rglob("*")
    for path in (p for files in shipped for p in files if p.is_file()):
        assert f"acceldeploy/{path.relative_to(PACKAGE).as_posix()}" in names, path
    for wanted in ("data/versions/stacks.yml", "data/versions/fetch.txt",
                   "data/schemas/bench-summary.schema.json", "data/role-defaults.yml",
                   "data/vllm_service/templates/vllm.service.j2"):  # fmt: skip
        assert f"acceldeploy/{wanted}" in names, wanted


def test_nothing_of_the_repository_is_imported(installed) -> None:
    probe = "import json, sys, acceldeploy; print(json.dumps([acceldeploy.__file__, sys.path]))"
    package, path = json.loads(run([installed["python"], "-c", probe], installed["tmp"],
                                   installed["env"]))  # fmt: skip
    assert Path(package).is_relative_to(installed["tmp"] / "venv"), package
    inside = [Path(p) for p in path if p and Path(p).resolve().is_relative_to(ROOT)]
    assert inside == [DEPENDENCIES], inside
    assert not (DEPENDENCIES / "acceldeploy").exists()


def test_the_installed_command_plans_an_inventory_outside_the_repository(installed) -> None:
    acceldeploy = installed["python"].parent / "acceldeploy"
    tmp, env, inventory = installed["tmp"], installed["env"], installed["inventory"]
    rendered = run([acceldeploy, "plan", "render", "-i", inventory], tmp, env)
    assert "hpu-01" in rendered and "vllm" in rendered
    unit = run([acceldeploy, "plan", "render", "-i", inventory, "--host", "hpu-01", "--unit"],
               tmp, env)  # fmt: skip
    assert "[Service]" in unit and "ExecStart=" in unit
    stacks = run([acceldeploy, "plan", "stacks"], tmp, env)
    assert "gaudi" in stacks and "cpu-vllm-0.13.0" in stacks
    version = run([acceldeploy, "--version"], tmp, env)
    assert str(tmp / "venv") in version and str(ROOT) not in version


def test_its_own_wheel_for_a_bundle_is_the_wheel_it_came_from(installed) -> None:
    tmp, env = installed["tmp"], installed["env"]
    write = ("import sys; from pathlib import Path; from acceldeploy.bundle import ownwheel; "
             "print(ownwheel.requirements()); "
             "print(ownwheel.build(Path(sys.argv[1]), Path(sys.argv[2])))")  # fmt: skip
    done = run([installed["python"], "-c", write, tmp / "own", tmp / "own.log"], tmp, env)
    requirements, own = done.splitlines()
    assert requirements == repr(dependencies())
    own_wheel = Path(own)
    assert own_wheel.name == installed["wheel"].name
    original, packed = members(installed["wheel"]), members(own_wheel)
    record = next(name for name in original if name.endswith(".dist-info/RECORD"))
    assert set(packed) == set(original)
    assert {n: b for n, b in packed.items() if n != record} == {
        n: b for n, b in original.items() if n != record
    }
    assert sorted(packed[record].decode().splitlines()) == sorted(
        original[record].decode().splitlines()
    )
    again = fresh_venv(tmp / "again", own_wheel, env)
    stacks = run([again.parent / "acceldeploy", "plan", "stacks"], tmp, env)
    assert "cpu-vllm-0.13.0" in stacks


def test_from_the_checkout_pip_builds_the_wheel_of_the_checkout(tmp_path, monkeypatch) -> None:
    seen: list[list[str]] = []

    def pip(argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        seen.append(list(argv))
        (tmp_path / "w" / f"acceldeploy-{acceldeploy.__version__}-py3-none-any.whl").touch()

    monkeypatch.setattr(wheelhouse, "run_logged", pip)
    assert ownwheel.editable_source(ownwheel.installed()) == ROOT  # `make venv` installs it so
    wheel = ownwheel.build(tmp_path / "w", tmp_path / "log")
    assert seen == [[sys.executable, "-m", "pip", "wheel", "--no-deps", "-w",
                     str(tmp_path / "w"), str(ROOT)]]  # fmt: skip
    assert wheel == tmp_path / "w" / f"acceldeploy-{acceldeploy.__version__}-py3-none-any.whl"


def test_the_bundles_controller_wheels_are_the_dependencies_and_its_own(tmp_path, monkeypatch):
    downloads: list[list[str]] = []
    monkeypatch.setattr(wheelhouse, "run_logged", lambda argv, *_: downloads.append(list(argv)))

    def own(dest: Path, log: Path) -> Path:
        (dest / "acceldeploy-0.1.0-py3-none-any.whl").touch()
        return dest / "acceldeploy-0.1.0-py3-none-any.whl"

    monkeypatch.setattr(ownwheel, "build", own)
    wheels = build.controller_wheels(tmp_path, lambda _: None)
    (argv,) = downloads
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert argv[-len(dependencies()) :] == dependencies()
    assert [w.name for w in wheels] == ["acceldeploy-0.1.0-py3-none-any.whl"]
