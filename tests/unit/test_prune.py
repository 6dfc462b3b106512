"""tools/acceldeploy/host/state/prune.py: what old env builds and model revisions may go."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from acceldeploy.host.state import prune
from acceldeploy.host.state.prune import Entry


def builds(*complete: bool) -> list[Entry]:
    return [
        Entry(f"/opt/venv-{k}", float(t), c)
        for t, (k, c) in enumerate(zip("abcde", complete, strict=True))
    ]


def test_keeps_the_current_the_newest_complete_and_what_is_in_use() -> None:
    found = builds(True, True, True, True, True)
    current = ["/opt/venv-e"]
    assert prune.removable(found, current, 1, []) == ["/opt/venv-a", "/opt/venv-b", "/opt/venv-c"]
    assert prune.removable(found, current, 2, []) == ["/opt/venv-a", "/opt/venv-b"]
    assert prune.removable(found, current, 0, []) == [e.path for e in found[:4]]
    # a rolled-back service still runs on b: never pruned, and not counted by keep
    assert prune.removable(found, current, 1, ["/opt/venv-b"]) == ["/opt/venv-a", "/opt/venv-c"]


def test_a_half_built_one_is_never_kept_by_count() -> None:
    found = builds(True, True, False, False, True)
    assert prune.removable(found, ["/opt/venv-e"], 1, []) == [
        "/opt/venv-a", "/opt/venv-c", "/opt/venv-d",
    ]  # fmt: skip
    # in use wins over incomplete
    assert "/opt/venv-d" not in prune.removable(found, ["/opt/venv-e"], 0, ["/opt/venv-d"])


def test_a_directory_holding_the_current_one_stays() -> None:
    found = [Entry("/models/org/m@refs", 1.0, True), Entry("/models/org/m@old", 2.0, True)]
    assert prune.removable(found, ["/models/org/m@refs/pr/1/"], 0, []) == ["/models/org/m@old"]


def test_named_means_the_path_itself_not_a_longer_name() -> None:
    texts = ["/opt/venv-ab/bin/python -m vllm", "serve /models/org/m@r1 --port 1"]
    assert prune.named("/opt/venv-ab", texts) and not prune.named("/opt/venv-a", texts)
    assert prune.named("/models/org/m@r1", texts) and not prune.named("/models/org/m@r", texts)
    assert prune.named("/models/org/m@r1", ["exec '/models/org/m@r1'"])
    assert prune.named("/models/org/m@r1", ["--model /models/org/m@r1"])


def test_revision_patterns_cover_the_served_models_only() -> None:
    assert prune.revision_patterns(
        ["/models/org/a@r2", "/models/org/a@r3", "/srv/mine", "/models/org/b@refs/pr/1"]
    ) == ["/models/org/a@*"]


def test_entries_and_what_a_running_process_names(tmp_path: Path) -> None:
    for name in ("venv-1", "venv-2", "venv-3"):
        (tmp_path / name).mkdir()
    (tmp_path / "venv-1/record.json").write_text("{}")
    (tmp_path / "venv-9").symlink_to(tmp_path / "venv-1")
    (tmp_path / "unit.launch").write_text(f"exec {tmp_path}/venv-2/bin/python\n")
    os.utime(tmp_path / "venv-3", (1, 1))
    found = prune.entries([f"{tmp_path}/venv-*"], "record.json")
    assert [(Path(e.path).name, e.complete) for e in found] == [
        ("venv-1", True), ("venv-2", False), ("venv-3", False),
    ]  # fmt: skip
    assert prune.named(f"{tmp_path}/venv-2", prune.file_texts([f"{tmp_path}/*.launch"]))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", f"{tmp_path}/venv-3"])  # fmt: skip
    try:
        # Popen returns once the child's exec has closed its pipe, which is before the kernel
        # has set up the new command line: under load /proc shows it empty for a moment.
        cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
        deadline = time.monotonic() + 10
        while b"venv-3" not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        texts = prune.command_lines(os.getpid())
        assert prune.named(f"{tmp_path}/venv-3", texts)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_negative_keep_removes_nothing_and_says_so() -> None:
    """python_env_keep: -1 once meant keep none (max(0, keep)): every older build went."""
    found = builds(True, True, True, True, True)
    try:
        prune.removable(found, ["/opt/venv-e"], -1, [])
    except ValueError as exc:
        assert "keep must be 0 or more, got -1" in str(exc)
    else:
        raise AssertionError("a negative keep was accepted")
