"""fetchlock: the fetch venv's lock filtered per host Python/arch, and its pip download."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from acceldeploy.downloads import fetchlock
from acceldeploy.downloads.fetchlock import download_argv, lock_requirements, pins_for

LOCK = fetchlock.LOCK
LOCK_TEXT = LOCK.read_text()
PYTHONS = ["3.9", "3.10", "3.11", "3.12", "3.13"]
ARCHES = ["x86_64", "aarch64"]

SAMPLE = """\
# a header
anyio==4.12.1 ; python_full_version < '3.10'  # via httpx
anyio==4.16.0 ; python_full_version >= '3.10' and sys_platform != 'emscripten'  # via httpx2
colorama==0.4.6 ; sys_platform == 'win32'  # via click

hf-xet==1.8.0 ; platform_machine == 'x86_64' or platform_machine == 'aarch64'
tomli==2.5.0 ; python_version == "3.10"
setuptools==84.2.1
"""


def names(pins: list[str]) -> list[str]:
    return [canonicalize_name(pin.split("==")[0]) for pin in pins]


def as_dict(pins: list[str]) -> dict[str, str]:
    return dict(zip(names(pins), (pin.split("==")[1] for pin in pins), strict=True))


# --- markers, on a small lock -------------------------------------------------------------


def test_markers_pick_per_python():
    assert pins_for(SAMPLE, "3.9", "x86_64") == [
        "anyio==4.12.1",
        "hf-xet==1.8.0",
        "setuptools==84.2.1",
    ]
    assert pins_for(SAMPLE, "3.10", "x86_64") == [
        "anyio==4.16.0",
        "hf-xet==1.8.0",
        "tomli==2.5.0",
        "setuptools==84.2.1",
    ]
    assert pins_for(SAMPLE, "3.13", "aarch64") == [
        "anyio==4.16.0",
        "hf-xet==1.8.0",
        "setuptools==84.2.1",
    ]


def test_markers_use_the_target_not_the_controller():
    """The controller is x86_64 Linux CPython 3.11: none of that may leak into the answer."""
    assert "hf-xet==1.8.0" not in pins_for(SAMPLE, "3.11", "ppc64le")
    env = fetchlock.marker_environment("3.9", "aarch64")
    assert env["platform_machine"] == "aarch64"
    assert env["python_version"] == "3.9" and env["python_full_version"] == "3.9.0"
    assert env["sys_platform"] == "linux" and env["implementation_name"] == "cpython"
    assert fetchlock.marker_environment("3.9.2", "x86_64")["python_full_version"] == "3.9.2"


def test_full_version_markers():
    lock = "a==1 ; python_full_version < '3.9.2'\na==2 ; python_full_version >= '3.9.2'\n"
    assert pins_for(lock, "3.9.1", "x86_64") == ["a==1"]
    assert pins_for(lock, "3.9.2", "x86_64") == ["a==2"]
    with pytest.raises(ValueError, match="patch release"):
        pins_for(lock, "3.9", "x86_64")


def test_one_pin_per_name_or_refused():
    with pytest.raises(ValueError, match="typing-extensions more than once"):
        pins_for("typing_extensions==4.1\nTyping-Extensions==4.2\n", "3.11", "x86_64")


@pytest.mark.parametrize(
    "line",
    [
        "anyio>=4",
        "anyio",
        "anyio==4.*",
        "anyio[trio]==4.16.0",
        "anyio==4.16.0,!=4.15",
        "anyio @ https://example.invalid/anyio-4.16.0-py3-none-any.whl",
        "--index-url https://example.invalid/simple",
        "anyio==4.16.0 ; python_version >>> '3.9'",
    ],
)
def test_only_exact_pins(line):
    with pytest.raises(ValueError, match="lock line 2"):
        lock_requirements(f"# header\n{line}\n")


@pytest.mark.parametrize(("python", "arch"), [("3", "x86_64"), ("2.7", "x86_64"), ("3.9", "")])
def test_bad_target(python, arch):
    with pytest.raises(ValueError):
        pins_for(SAMPLE, python, arch)


# --- the real lock ------------------------------------------------------------------------


def test_every_line_of_the_lock_parses():
    lines = [line for line in LOCK_TEXT.splitlines() if line.strip() and not line.startswith("#")]
    requirements = lock_requirements(LOCK_TEXT)
    assert len(requirements) == len(lines) > 20
    for req in requirements:
        assert str(next(iter(req.specifier))).startswith("==")


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("python", PYTHONS)
def test_each_python_gets_one_complete_set(python, arch):
    pins = pins_for(LOCK_TEXT, python, arch)
    assert len(names(pins)) == len(set(names(pins)))
    for pin in pins:
        req = Requirement(pin)
        assert req.marker is None and str(req.specifier).startswith("==")
    got = set(names(pins))
    assert {"huggingface-hub", "modelscope", "setuptools", "hf-xet", "packaging"} <= got
    assert not {"colorama", "httpx2-jsfetch"} & got  # win32, emscripten


def test_a_late_patch_release_gets_the_same_pins():
    for python in PYTHONS:
        assert pins_for(LOCK_TEXT, python, "x86_64") == pins_for(
            LOCK_TEXT, f"{python}.18", "x86_64"
        )


def test_3_9_and_3_13_pick_different_pins_where_the_lock_differs():
    old, new = (
        as_dict(pins_for(LOCK_TEXT, "3.9", "x86_64")),
        as_dict(pins_for(LOCK_TEXT, "3.13", "x86_64")),
    )
    per_python = {
        canonicalize_name(req.name)
        for req in lock_requirements(LOCK_TEXT)
        if req.marker is not None and "python" in str(req.marker)
    }
    differing = {name for name in old.keys() & new.keys() if old[name] != new[name]}
    assert {"huggingface-hub", "modelscope", "setuptools", "anyio", "filelock"} <= differing
    assert differing <= per_python
    for name in differing:
        assert Version(old[name]) < Version(new[name]), name
    assert "modelscope-hub" in new and "modelscope-hub" not in old  # modelscope-hub needs 3.10+


def test_the_lock_header_says_how_it_was_resolved():
    assert "uv pip compile --universal" in LOCK_TEXT and "--python-version 3.9" in LOCK_TEXT


# --- pip download -------------------------------------------------------------------------


def test_download_argv_shape():
    argv = download_argv(
        "/py", "/d", "/d/requirements.txt", "3.9", "x86_64", 31, ["--retries", "9"]
    )
    assert argv[:16] == [
        "/py",
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--no-deps",
        "--implementation",
        "cp",
        "--python-version",
        "3.9",
        "--dest",
        "/d",
        "--requirement",
        "/d/requirements.txt",
    ]
    platforms = argv[16:-2]
    assert platforms == [f"--platform=manylinux_2_{n}_x86_64" for n in range(17, 32)] + [
        "--platform=manylinux2014_x86_64"
    ]
    assert argv[-2:] == ["--retries", "9"]


def test_download_argv_takes_paths_and_full_versions():
    argv = download_argv("/py", Path("/d"), Path("/r.txt"), "3.13.1", "aarch64", 17)
    assert argv[argv.index("--python-version") + 1] == "3.13"
    assert argv[argv.index("--dest") + 1] == "/d"
    assert argv[-2:] == ["--platform=manylinux_2_17_aarch64", "--platform=manylinux2014_aarch64"]


def test_download_argv_refuses_glibc_older_than_manylinux2014():
    with pytest.raises(ValueError, match=r"2\.16"):
        download_argv("/py", "/d", "/r", "3.9", "x86_64", 16)


def test_module_keeps_python_3_9_syntax():
    ast.parse(Path(fetchlock.__file__).read_text(), feature_version=(3, 9))


# --- the CLI, with pip faked: atomic, idempotent ------------------------------------------


class FakePip:
    def __init__(self, rc=0, skip=0):
        self.rc, self.skip, self.calls, self.argv = rc, skip, 0, []

    def __call__(self, argv, check, stdout=None):
        self.calls += 1
        self.argv, self.stdout = argv, stdout
        dest = Path(argv[argv.index("--dest") + 1])
        pins = Path(argv[argv.index("--requirement") + 1]).read_text().split()
        for pin in pins[self.skip :]:
            name, version = pin.split("==")
            (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"w")
        return subprocess.CompletedProcess(argv, self.rc)


def run_cli(tmp_path, monkeypatch, pip, lock=SAMPLE, python="3.10", extra=()):
    (tmp_path / "lock.txt").write_text(lock)
    monkeypatch.setattr(fetchlock.subprocess, "run", pip)
    args = ["download", "--python", python, "--arch", "x86_64", "--glibc", "31", *extra]
    return fetchlock.main(
        [*args, "--dest", str(tmp_path / "set"), "--lock", str(tmp_path / "lock.txt")]
    )


def test_a_caller_whose_stdout_is_its_answer_gets_the_progress_elsewhere(
    tmp_path, monkeypatch, capsys
):
    """acceldeploy bundle build --json prints its summary alone on stdout: the hub clients'
    download it runs says its progress, and pip its own, on the stream it names."""
    (tmp_path / "lock.txt").write_text(SAMPLE)
    pip = FakePip()
    monkeypatch.setattr(fetchlock.subprocess, "run", pip)
    args = (tmp_path / "lock.txt", tmp_path / "set", "3.10", "x86_64", 31, ())
    assert fetchlock.download(*args, out=sys.stderr) == 0
    seen = capsys.readouterr()
    assert seen.out == "" and "4 pins for CPython 3.10" in seen.err and pip.stdout is sys.stderr


def test_cli_downloads_then_skips(tmp_path, monkeypatch, capsys):
    pip = FakePip()
    assert run_cli(tmp_path, monkeypatch, pip) == 0
    dest = tmp_path / "set"
    assert (dest / "requirements.txt").read_text() == "".join(
        f"{p}\n" for p in pins_for(SAMPLE, "3.10", "x86_64")
    )
    assert len(list(dest.glob("*.whl"))) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock.txt", "set"]
    assert run_cli(tmp_path, monkeypatch, pip) == 0 and pip.calls == 1
    out = capsys.readouterr().out
    assert "4 pins for CPython 3.10 x86_64 glibc 2.31" in out and "already complete" in out
    assert run_cli(tmp_path, monkeypatch, pip, python="3.9") == 0 and pip.calls == 2
    assert len(list(dest.glob("*.whl"))) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock.txt", "set"]


@pytest.mark.parametrize(
    "pip", [FakePip(rc=1), FakePip(skip=1)], ids=["pip-fails", "wheel-missing"]
)
def test_cli_never_leaves_a_partial_set(tmp_path, monkeypatch, pip):
    assert run_cli(tmp_path, monkeypatch, pip) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock.txt"]


def test_cli_failure_keeps_the_previous_set(tmp_path, monkeypatch):
    assert run_cli(tmp_path, monkeypatch, FakePip(), python="3.9") == 0
    before = sorted(p.name for p in (tmp_path / "set").iterdir())
    assert run_cli(tmp_path, monkeypatch, FakePip(rc=1), python="3.10") == 1
    assert sorted(p.name for p in (tmp_path / "set").iterdir()) == before


def test_cli_bad_lock_is_an_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    assert run_cli(tmp_path, monkeypatch, FakePip(), lock="anyio>=4\n") == 2
    assert "not name==version" in capsys.readouterr().err


def test_cli_passes_pip_args_last(tmp_path, monkeypatch):
    pip = FakePip()
    extra = ["--pip-arg=--index-url=http://127.0.0.1:1/simple", "--pip-arg=--retries=0"]
    assert run_cli(tmp_path, monkeypatch, pip, extra=extra) == 0
    assert pip.argv[-3:] == [
        "--platform=manylinux2014_x86_64",
        "--index-url=http://127.0.0.1:1/simple",
        "--retries=0",
    ]
    assert pip.argv[pip.argv.index("--python-version") + 1] == "3.10"
