"""lab/acceldeploy_lab/progress.py: a line when a long step starts, while it runs (bytes and
rate of what it writes) and when it ends, on stderr."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from acceldeploy_lab import progress


def test_a_step_reports_start_bytes_rate_and_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "before").write_bytes(b"x" * 500)
    with progress.step("download", watch=tmp_path, every=0.05):
        (tmp_path / "wheel").write_bytes(b"x" * 2_000_000)
        time.sleep(0.2)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "==> download"
    assert any(
        re.fullmatch(r"    download: 2\.0 MB in \d+ s \([\d.]+ [KMG]?B/s\)", line)
        for line in err[1:-1]
    )
    assert re.fullmatch(r"    download: done in 0\.\d s, 2\.0 MB written", err[-1])


def test_a_failing_step_says_so_and_raises(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), progress.step("install"):
        raise RuntimeError("pip failed")
    assert re.fullmatch(r"    install: failed in 0\.0 s", capsys.readouterr().err.splitlines()[-1])


def test_a_rebuild_that_clears_its_directory_counts_what_it_writes_afresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old"
    old.write_bytes(b"x" * 3_000_000)
    with progress.step("labenv", watch=tmp_path, every=0.05):
        old.unlink()
        time.sleep(0.12)
        (tmp_path / "new").write_bytes(b"x" * 1_000_000)
        time.sleep(0.12)
    err = capsys.readouterr().err
    assert "-" not in err.replace("==>", "")
    assert err.splitlines()[-1].endswith("1.0 MB written")
