"""acceldeploy.planner.stacks: versions/stacks.yml loaded and checked, the cpu lock read."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import stacks


def write_stacks(tmp_path: Path, change: dict[str, dict[str, object]]) -> Path:
    data = yaml.safe_load(stacks.STACKS_FILE.read_text())
    for platform, values in change.items():
        data[platform] = {**data[platform], **values}
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_stack_names_its_platform_and_file() -> None:
    loaded = stacks.load_stacks()
    assert {"ascend", "gaudi", "cpu"} <= set(loaded)
    for name, entry in loaded.items():
        assert entry["name"] == name and entry["file"] == str(stacks.STACKS_FILE)


def test_missing_or_malformed_file(tmp_path: Path) -> None:
    with pytest.raises(AcceldeployError, match="does not exist"):
        stacks.load_stacks(tmp_path / "none.yml")
    (tmp_path / "list.yml").write_text("- ascend\n")
    with pytest.raises(AcceldeployError, match="expected a mapping of platform -> stack"):
        stacks.load_stacks(tmp_path / "list.yml")


def test_a_stack_lacking_keys_is_named(tmp_path: Path) -> None:
    path = write_stacks(tmp_path, {"gaudi": {"image": "", "software": None}})
    with pytest.raises(AcceldeployError, match=re.escape("gaudi stack lacks software, image")):
        stacks.load_stacks(path)


def test_unknown_platform_lists_the_pinned_ones() -> None:
    with pytest.raises(AcceldeployError, match=r"has no pinned stack in .*; use one of ascend, "):
        stacks.stack("cuda")


def test_lock_lines_must_be_pins(tmp_path: Path) -> None:
    (tmp_path / "lock.txt").write_text("# comment\nsix==1.17.0  # why\n\nrich>=13\n")
    entry = {"name": "cpu", "file": str(tmp_path / "stacks.yml"), "lock": "lock.txt",
             "ray": "2.48.0"}  # fmt: skip
    with pytest.raises(AcceldeployError, match=re.escape("not a name==version pin: 'rich>=13'")):
        stacks.lock_requirements(entry)
    (tmp_path / "lock.txt").write_text("ray==2.48.0\nsix==1.17.0  # why\n")
    extra = {**entry, "extra_requirements": ["tqdm==4.0"]}
    assert stacks.lock_requirements(extra) == ["ray==2.48.0", "six==1.17.0", "tqdm==4.0"]
    # the stack's Ray pin and the lock's must agree
    with pytest.raises(AcceldeployError, match=re.escape("does not pin ray==2.47.1 (versions/")):
        stacks.lock_requirements({**entry, "ray": "2.47.1"})
    with pytest.raises(AcceldeployError, match=r"stack's lock .* does not exist"):
        stacks.lock_requirements({**entry, "lock": "gone.txt"})


def test_stacks_imports_neither_platforms_nor_runtimes() -> None:
    # platforms.py imports stacks.py: stacks must not import back.
    code = (
        "import sys, acceldeploy.planner.stacks; "
        "print(sorted(m for m in sys.modules if m.startswith('acceldeploy.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "acceldeploy.planner.platforms" not in out and "acceldeploy.runtimes" not in out
