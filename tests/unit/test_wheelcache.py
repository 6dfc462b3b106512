"""tools/acceldeploy/downloads/wheelcache.py: which pins a wheel directory cannot install on a target,
by pip's own tag rules, and the preflight message that names them and the fix."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "filter"))

from runtime_filters import python_env_wheel_errors

from acceldeploy.downloads import wheelcache
from acceldeploy.runtimes import python_env_plan

WHEELS = (
    "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "six-1.17.0-py2.py3-none-any.whl",
    "tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "numpy-2.2.6-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "not-a-wheel.whl",
)
PINS = ["torch==2.9.1", "six==1.17.0", "tokenizers==0.22.2", "numpy==2.2.6"]


def cache_with(tmp_path: Path, names: tuple[str, ...] = WHEELS) -> Path:
    (tmp_path / "wheels").mkdir()
    for name in names:
        (tmp_path / "wheels" / name).write_bytes(b"")
    return tmp_path


def test_tags_follow_the_targets_python_and_glibc(tmp_path: Path) -> None:
    wheels = cache_with(tmp_path) / "wheels"
    assert wheelcache.missing(wheels, PINS, "3.11", "x86_64", 36) == ["numpy==2.2.6"]
    assert wheelcache.missing(wheels, PINS, "3.13", "x86_64", 36) == ["torch==2.9.1"]
    # glibc 2.27 cannot load a manylinux_2_28 wheel; abi3 and py3-none wheels fit any CPython.
    assert wheelcache.missing(wheels, PINS, "3.11", "x86_64", 27) == [
        "torch==2.9.1",
        "numpy==2.2.6",
    ]
    assert wheelcache.missing(wheels, PINS, "3.11", "aarch64", 36) == ["torch==2.9.1", "tokenizers==0.22.2", "numpy==2.2.6"]  # fmt: skip
    assert wheelcache.missing(tmp_path / "absent", PINS[:1], "3.11", "x86_64", 36) == PINS[:1]


def test_versions_compare_as_versions(tmp_path: Path) -> None:
    wheels = cache_with(tmp_path, ("vllm-0.12.0+cpu-cp313-cp313-manylinux_2_17_x86_64.whl",))
    assert wheelcache.missing(wheels / "wheels", ["vllm==0.12.0+cpu"], "3.13", "x86_64", 36) == []
    assert wheelcache.missing(wheels / "wheels", ["vllm==0.12.0"], "3.13", "x86_64", 36) == [
        "vllm==0.12.0"
    ]


def test_preflight_message_names_the_tag_the_wheels_and_the_command(tmp_path: Path) -> None:
    cache = cache_with(tmp_path)
    spec = python_env_plan(
        {"platform": "cpu", "no_index": True, "find_links": ["http://127.0.0.1:8091/"],
         "venv_python": "/usr/bin/python3.13"}
    )  # fmt: skip
    target = {"stack_wheels": {"key": "cp313-x86_64-glibc2.41", "python": "3.13",
                               "arch": "x86_64", "glibc": 41}}  # fmt: skip
    (message,) = python_env_wheel_errors(spec, str(cache), target, "/usr/bin/python3")
    assert message.startswith(
        f"python_env_wheel_cache: {cache}/wheels has no cp313-x86_64-glibc2.41"
    )
    assert "wheel for " in message and "/usr/bin/python3.13 is Python 3.13" in message
    assert (
        f"PYTHONPATH=tools /usr/bin/python3 -m acceldeploy.downloads.wheelhouse fetch --cache {cache} "
        "--python-version 3.13" in message
    )
    # Not asked for: no cache, no interpreter of the stack's (conda), or a stack without a lock.
    assert python_env_wheel_errors(spec, "", target, "/usr/bin/python3") == []
    assert python_env_wheel_errors(spec, str(cache), {}, "/usr/bin/python3") == []
    ascend = python_env_plan({"platform": "ascend", "manager": "venv"})
    assert python_env_wheel_errors(ascend, str(cache), target, "/usr/bin/python3") == []
