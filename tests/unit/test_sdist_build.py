"""Pins built from their sdists (python_env_build_from_sdist, a stack's sdist_only): the plan
builds their wheels into the build's own directory and installs them from there, the key
changes only for such a build, and the controller's cache check names a missing sdist or build
requirement before any host changes. The lab builds one (tests/lab/test_python_env.py, slow)."""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from acceldeploy.bundle import build as bundle
from acceldeploy.downloads import sdists, wheelcache
from acceldeploy.errors import AcceldeployError
from acceldeploy.runtimes import python_env

SOURCES = {"platform": "cpu", "find_links": ["http://127.0.0.1:9/"], "no_index": True}


def plan(**options: Any) -> dict[str, Any]:
    return python_env.python_env_plan({**SOURCES, **options})


def named(built: dict[str, Any]) -> list[str]:
    return [s["name"] for s in built["steps"]]


def test_a_pin_from_its_sdist_is_built_into_the_build_then_installed_from_there() -> None:
    usual, built = plan(), plan(build_from_sdist=["Six"])
    assert built["from_sdist"] == ["six==1.17.0"] and usual["from_sdist"] == []
    assert built["key"] != usual["key"]
    assert "six==1.17.0" not in built["requirements_text"].split()
    assert built["expect"]["six"] == "1.17.0"
    steps = named(built)
    build = steps.index("build six==1.17.0 from the sdist (a wheel, kept in the build)")
    assert build < steps.index("install the pinned set with uv (--no-deps: the lock is complete)")
    assert steps[-2] == "install the wheels built from sdists"
    directory = f"{built['staging']}/{python_env.BUILT_WHEELS_DIR}"
    command = built["steps"][build]["command"]
    assert "wheel --disable-pip-version-check" in command and "--no-binary six" in command
    assert f"-w {directory}" in command and "--no-index --find-links http://127.0.0.1:9/" in command
    install = built["steps"][-2]["command"]
    assert install.endswith(f"--no-deps --no-index --find-links {directory} six==1.17.0")
    assert "from_sdist" not in usual["record"] and built["record"]["from_sdist"] == ["six==1.17.0"]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"build_from_sdist": ["not-pinned"]}, "python_env_build_from_sdist names not-pinned"),
        (
            {"build_from_sdist": ["six"], "manager": "container", "platform": "gaudi"},
            "python_env_build_from_sdist is set but python_env_manager is container",
        ),
    ],
)
def test_a_wrong_choice_is_refused_naming_the_variable(options: dict[str, Any], says: str) -> None:
    with pytest.raises(AcceldeployError, match=says):
        plan(**options)


def test_an_extra_package_may_be_built_from_its_sdist() -> None:
    built = plan(extra_packages=["acceldeploy-demo==1.0"], build_from_sdist=["acceldeploy_demo"])
    assert built["from_sdist"] == ["acceldeploy-demo==1.0"]


def _sdist(directory: Path, name: str, pyproject: str | None, zipped: bool = False) -> Path:
    files = {f"{name}/setup.py": "from setuptools import setup\nsetup()\n"}
    if pyproject is not None:
        files[f"{name}/pyproject.toml"] = pyproject
    if zipped:
        path = directory / f"{name}.zip"
        with zipfile.ZipFile(path, "w") as archive:
            for member, text in files.items():
                archive.writestr(member, text)
        return path
    path = directory / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _wheel(directory: Path, filename: str) -> None:
    with zipfile.ZipFile(directory / filename, "w") as archive:
        archive.writestr("x.dist-info/METADATA", "")


def test_an_sdist_is_found_by_its_normalised_name_and_its_build_requirements_read(
    tmp_path: Path,
) -> None:
    legacy = _sdist(tmp_path, "Six-1.17.0", None)
    assert sdists.find(tmp_path, "six==1.17.0") == legacy
    assert sdists.find(tmp_path, "six==1.16.0") is None
    assert sdists.build_requires(legacy) == list(sdists.LEGACY_BUILD_REQUIRES)
    hatch = _sdist(
        tmp_path, "demo_pkg-2.0", '[build-system]\nrequires = ["hatchling>=1.2"]\n', True
    )
    assert sdists.find(tmp_path, "demo-pkg==2.0") == hatch
    assert sdists.build_requires(hatch) == ["hatchling>=1.2"]


def test_the_cache_check_names_a_missing_sdist_or_build_requirement(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for pin in python_env.python_env_plan(SOURCES)["requirements_text"].split():
        name, _, version = pin.partition("==")
        _wheel(wheels, f"{name.replace('-', '_')}-{version}-py3-none-any.whl")
    spec = plan(build_from_sdist=["six"])
    target = {"stack_wheels": {"python": "3.11", "arch": "x86_64", "glibc": 36, "key": "k"}}

    def errors() -> str:
        return " ".join(wheelcache.stack_wheel_errors(spec, str(tmp_path), target, "FETCH"))

    assert "lacks six==1.17.0 (sdist)" in errors() and "run `FETCH`" in errors()
    _sdist(wheels, "six-1.17.0", None)
    assert "wheel>=0 (to build six)" not in errors()
    assert "wheel (to build six)" in errors() and "setuptools" not in errors()
    _wheel(wheels, "wheel-0.45.1-py3-none-any.whl")
    assert errors() == ""
    argv = wheelcache.fetch_argv(spec, str(tmp_path), "3.11", "/usr/bin/python3")
    assert argv[argv.index("--from-sdist") + 1] == "six==1.17.0"


def test_the_controller_keeps_a_builds_wheels_by_its_key() -> None:
    key = plan(build_from_sdist=["six"])["key"]
    chosen = {"built_store": "/srv/built", "wheel_cache": "/c", "controller_cache": "/a"}
    assert python_env.built_store(chosen, key) == f"/srv/built/{key}"
    assert python_env.built_store({**chosen, "built_store": ""}, key) == f"/c/built/{key}"
    assert python_env.built_store({"controller_cache": "/a/"}, key) == f"/a/built/{key}"
    assert plan(build_from_sdist=["six"], wheel_cache="/c")["built_store"] == f"/c/built/{key}"
    assert plan(wheel_cache="/c")["built_store"] == ""


def test_a_kept_wheel_is_installed_and_nothing_is_built_again(tmp_path: Path) -> None:
    built = plan(build_from_sdist=["six"])
    (step,) = [s for s in built["steps"] if s["name"].startswith("build six==1.17.0")]
    directory = tmp_path / python_env.BUILT_WHEELS_DIR
    argv = [str(a).replace(built["built_dir"], str(directory)) for a in step["argv"]]
    # the build command itself stands in as `false`: it must not run when the wheel is held
    guarded = [*argv[: argv.index("bash", 1) + 1], "false"]
    directory.mkdir()
    assert subprocess.run(guarded, check=False).returncode == 1
    (directory / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"")
    held = subprocess.run(guarded, capture_output=True, text=True, check=False)
    assert held.returncode == 0 and held.stdout.startswith("kept:")


def test_the_cache_check_takes_a_kept_wheel_for_the_sdist(tmp_path: Path) -> None:
    spec = plan(build_from_sdist=["six"], wheel_cache=str(tmp_path))
    assert wheelcache.unbuilt(spec) == ["six==1.17.0"]
    store = Path(spec["built_store"])
    store.mkdir(parents=True)
    (store / f"{python_env.wheel_stem('Six==1.17.0')}-py2.py3-none-any.whl").write_bytes(b"")
    assert wheelcache.unbuilt(spec) == []
    assert "--from-sdist" not in wheelcache.fetch_argv(spec, str(tmp_path), "3.11", "python3")


def test_the_bundle_carries_the_wheels_a_build_made(tmp_path: Path) -> None:
    hostvars = {"acceldeploy_platform": "cpu", "python_env_build_from_sdist": ["six"]}
    key, pins, wheels = bundle.built_wheels("h1", hostvars, tmp_path)
    assert pins == ["six==1.17.0"] and wheels == []
    store = tmp_path / bundle.BUILT / key
    store.mkdir(parents=True)
    (store / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"")
    assert bundle.built_wheels("h1", hostvars, tmp_path)[2] == [
        store / "six-1.17.0-py2.py3-none-any.whl"
    ]
    assert bundle.built_wheels("h1", {"acceldeploy_platform": "cpu"}, tmp_path)[1:] == ([], [])
    with pytest.raises(AcceldeployError, match="h1: python_env_soc_version is empty"):
        bundle.built_wheels(
            "h1",
            {"acceldeploy_platform": "ascend", "acceldeploy_stack": "ascend-vllm-0.23.0.post1"},
            tmp_path,
        )
