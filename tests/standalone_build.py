"""The acceldeploy wheel as a user outside the repository builds it, shared by
tests/unit/test_standalone_wheel.py and tests/lab/test_standalone_lab.py: `pip wheel` of a copy
of the package's sources (setuptools' build/ in the checkout would carry files since removed
into the wheel), and the command runner both use. pytest puts tests/ (the directory of
tests/conftest.py) on sys.path, so either test directory imports it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tools" / "acceldeploy"


def run(argv: Sequence[str | Path], cwd: Path, env: Mapping[str, str], timeout: float = 900) -> str:
    """``argv`` run in ``cwd`` with exactly ``env``; its stdout, asserting that it succeeded."""
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=dict(env), capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip
    assert proc.returncode == 0, f"{argv}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def build_wheel(tmp: Path, env: Mapping[str, str]) -> Path:
    """The acceldeploy wheel in <tmp>/dist, built from a copy of the sources in <tmp>/source."""
    dist, source = tmp / "dist", tmp / "source"
    shutil.copytree(PACKAGE, source / "tools" / "acceldeploy",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
    for name in ("pyproject.toml", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, source],
        tmp, env)  # fmt: skip
    (wheel,) = dist.glob("acceldeploy-*.whl")
    return wheel
