"""The lab is its own distribution, acceldeploy-lab (lab/pyproject.toml, the package
acceldeploy_lab in lab/): of acceldeploy's version, depending on that acceldeploy, adding
`acceldeploy lab` through an entry point. The product holds none of it: no file of the
package imports it, and acceldeploy's wheel has no lab file (the collection's tarball:
test_collection.py)."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import acceldeploy
import acceldeploy_lab

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab"
# an import of the lab, whatever its form: import / from ... import / import_module("...")
LAB_IMPORT = re.compile(
    r"^\s*(?:import|from)\s+acceldeploy_lab\b|import_module\(\s*[\"']acceldeploy_lab", re.M
)


def test_the_lab_is_of_acceldeploys_version_and_depends_on_it() -> None:
    project = tomllib.loads((LAB / "pyproject.toml").read_text())["project"]
    assert project["name"] == "acceldeploy-lab"
    assert project["version"] == acceldeploy.__version__
    assert project["dependencies"] == [f"acceldeploy=={acceldeploy.__version__}"]
    assert project["entry-points"]["acceldeploy.commands"] == {"lab": "acceldeploy_lab.command"}
    # installed (make venv): from lab/, of that version
    assert importlib.metadata.version("acceldeploy-lab") == acceldeploy.__version__
    assert Path(acceldeploy_lab.__file__).resolve().parent == LAB / "acceldeploy_lab"


def test_no_file_of_the_product_imports_the_lab() -> None:
    """acceldeploy does not depend on acceldeploy-lab: an import of it would fail wherever the
    lab is not installed (lint-imports checks the same on the import graph)."""
    product = [*(ROOT / "tools" / "acceldeploy").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]
    assert len(product) > 100
    importing = [
        str(path.relative_to(ROOT))
        for path in product
        if "__pycache__" not in path.parts and LAB_IMPORT.search(path.read_text())
    ]
    assert not importing
    assert LAB_IMPORT.search("from acceldeploy_lab import hosts")
    assert LAB_IMPORT.search("    import acceldeploy_lab.cli as lab")
    assert not LAB_IMPORT.search("# made by acceldeploy_lab.tinymodel")
    assert not (ROOT / "tools" / "acceldeploy" / "lab").exists()


def test_the_lab_finds_the_repository_and_both_packages_for_its_children() -> None:
    """A helper server or a host's supervisor runs under another interpreter (olah's venv, the
    labenv) with the PYTHONPATH pythonpath() gives: both packages of this checkout from it."""
    assert acceldeploy_lab.REPO == ROOT
    tools = Path(acceldeploy.__file__).resolve().parents[1]
    assert acceldeploy_lab.pythonpath("/x").split(":") == [str(tools), str(LAB), "/x"]
    code = "import acceldeploy as a, acceldeploy_lab as b; print(a.__file__, b.__file__)"
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],  # -S: not the venv's installs, PYTHONPATH alone
        env={"PYTHONPATH": acceldeploy_lab.pythonpath()}, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        str(tools / "acceldeploy" / "__init__.py"),
        str(LAB / "acceldeploy_lab" / "__init__.py"),
    ]


def wheel(source: Path, out: Path) -> zipfile.ZipFile:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "-w", str(out), str(source)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = out.glob("*.whl")
    return zipfile.ZipFile(built)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two projects' own files copied (no build/ or egg-info left by an earlier build)."""
    tmp = tmp_path_factory.mktemp("sources")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("pyproject.toml", "LICENSE"):
        shutil.copy(ROOT / name, tmp / name)
    shutil.copytree(ROOT / "tools" / "acceldeploy", tmp / "tools" / "acceldeploy", ignore=skip)
    shutil.copytree(LAB, tmp / "lab", ignore=skip)
    return tmp


def test_the_product_wheel_holds_no_lab(sources: Path, tmp_path: Path) -> None:
    with wheel(sources, tmp_path) as built:
        names = built.namelist()
    assert "acceldeploy/cli/__init__.py" in names and "acceldeploy/host/state/drift.py" in names
    lab = [n for n in names if n.startswith(("acceldeploy_lab", "acceldeploy/lab/"))]
    assert not lab and "acceldeploy/cli/lab.py" not in names, lab


def test_the_lab_wheel_holds_the_lab_alone(sources: Path, tmp_path: Path) -> None:
    with wheel(sources / "lab", tmp_path) as built:
        names = built.namelist()
        (meta,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = built.read(meta).decode()
        (entry,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = built.read(entry).decode()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"acceldeploy_lab"}
    assert "acceldeploy_lab/command.py" in names and "acceldeploy_lab/hosts.py" in names
    assert f"Requires-Dist: acceldeploy=={acceldeploy.__version__}" in metadata
    assert "[acceldeploy.commands]\nlab = acceldeploy_lab.command" in entry_points
