"""Rendered units as the role installs them, checked by systemd's own `systemd-analyze verify`
(the role runs the same check before a unit replaces the old one)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from acceldeploy.serving.unit import render_files


def analyze_units(units: Iterable[Any], where: Path, helpers: Iterable[str],
                  drop: Iterable[str] = ()) -> None:  # fmt: skip
    """Write every unit and launcher into `where` with stand-ins for the helpers they call,
    leave out the directives named in `drop` (a helper's interpreter this machine lacks), and
    assert systemd-analyze verify passes each unit without naming it."""
    units = list(units)
    for helper in helpers:
        (where / helper).write_text("#!/bin/sh\n")
        os.chmod(where / helper, 0o755)
    for unit in units:
        for path, text in render_files(unit).items():
            target = where / Path(path).name
            target.write_text(text)
            os.chmod(target, 0o755 if path.endswith(".launch") else 0o644)
    for unit in units:
        unit_file = where / Path(unit.unit_path).name
        lines = unit_file.read_text().splitlines()
        unit_file.write_text(
            "\n".join(line for line in lines if not line.startswith(tuple(f"{d}=" for d in drop)))
            + "\n"
        )
        proc = subprocess.run(["systemd-analyze", "verify", str(unit_file)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert unit.name not in proc.stderr, proc.stderr


def analyze_host_plan(plan: Any, where: Path, helpers: Iterable[str],
                      drop: Iterable[str] = ()) -> set[str]:  # fmt: skip
    """Every unit of one host plan (its vLLM services and node units), rendered with its
    launchers in `where` and checked by analyze_units; their names."""
    from acceldeploy.serving.hostplan import HostPlan
    from acceldeploy.serving.values import UnitOptions

    plan = HostPlan(plan.platform, plan.services, plan.context,
                    UnitOptions(launcher_dir=str(where)))  # fmt: skip
    units = [*plan.units(), *plan.node_units()]
    analyze_units(units, where, helpers, drop)
    return {u.name for u in units}
