"""A rendered unit checked by systemd-analyze verify, as the role checks it before it replaces
the old one: its files written into ``directory`` (the unit's launcher_dir, so ExecStart and
ExecStartPost exist), then verified."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from acceldeploy.serving.unit import render_files


def verify_rendered(unit: Any, directory: Path) -> None:
    for path, text in render_files(unit).items():
        target = directory / Path(path).name
        target.write_text(text)
        os.chmod(target, 0o755 if path.endswith(".launch") else 0o644)
    Path(unit.ready_path).write_text("#!/bin/sh\n")
    os.chmod(unit.ready_path, 0o755)
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(directory / Path(unit.unit_path).name)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert unit.name not in proc.stderr, proc.stderr
