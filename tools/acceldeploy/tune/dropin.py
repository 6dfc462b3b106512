"""A tune point on the real service without touching the managed unit: a runtime drop-in
(/run: gone at reboot) whose ExecStart runs the point's launcher, rendered from the same
template as the deployed one, and whose Environment= lines carry the point's env. Removing
both and restarting puts the deployed flags back."""

from __future__ import annotations

import shlex
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from acceldeploy.bench.runner import DEPLOYED
from acceldeploy.serving.unit import ServiceUnit, env_value, render_files

RUN_DIR = "/run/acceldeploy-tune"
DROPIN_NAME = "zz-acceldeploy-tune.conf"


@dataclass(frozen=True)
class Paths:
    launcher: str
    dropin_dir: str
    dropin: str

    @classmethod
    def of(cls, service: str) -> Paths:
        dropin_dir = f"/run/systemd/system/{service}.service.d"
        return cls(f"{RUN_DIR}/{service}.launch", dropin_dir, f"{dropin_dir}/{DROPIN_NAME}")


def launcher_text(unit: ServiceUnit) -> str:
    """The point's launcher: the deployed launcher's template, the point's argv."""
    return render_files(unit)[unit.launcher_path]


def dropin_text(unit: ServiceUnit, label: str) -> str:
    lines = [
        f"# tools/tune.py point: {label} (a runtime drop-in: tune removes it, a reboot too)",
        "[Service]",
        "ExecStart=",
        f"ExecStart={Paths.of(unit.name).launcher}",
        *(f"Environment={env_value(k, v)}" for k, v in sorted(unit.env.items())),
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Started:
    ok: bool
    seconds: float
    journal: list[str]


def _put_text(conn: Any, text: str, remote: str, mode: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".tmp") as f:
        f.write(text)
        f.flush()
        conn.put(f.name, remote)
    conn.run(f"chmod {mode} {shlex.quote(remote)}", hide=True)


def restart(conn: Any, service: str) -> Started:
    """Restart and wait for /health (the unit's ExecStartPost); the journal when it fails."""
    unit = shlex.quote(f"{service}.service")
    since = conn.run("date '+%Y-%m-%d %H:%M:%S'", hide=True).stdout.strip()
    conn.run(f"systemctl reset-failed {unit}", hide=True, warn=True)
    started = time.monotonic()
    result = conn.run(f"systemctl restart {unit}", hide=True, warn=True, timeout=3600)
    seconds = round(time.monotonic() - started, 1)
    if result.exited == 0:
        return Started(True, seconds, [])
    journal = conn.run(
        f"journalctl -u {unit} --since {shlex.quote(since)} -o cat --no-pager | tail -n 40",
        hide=True,
        warn=True,
    ).stdout.splitlines()
    return Started(False, seconds, journal)


def apply(conn: Any, unit: ServiceUnit, label: str) -> Started:
    paths = Paths.of(unit.name)
    conn.run(f"install -d -m 0755 {RUN_DIR} {shlex.quote(paths.dropin_dir)}", hide=True)
    _put_text(conn, launcher_text(unit), paths.launcher, "0755")
    _put_text(conn, dropin_text(unit, label), paths.dropin, "0644")
    conn.run("systemctl daemon-reload", hide=True)
    return restart(conn, unit.name)


def remove(conn: Any, service: str) -> Started:
    """Back to the deployed flags: drop-in and launcher gone, restarted, healthy."""
    paths = Paths.of(service)
    conn.run(f"rm -f {shlex.quote(paths.dropin)} {shlex.quote(paths.launcher)}", hide=True)
    conn.run("systemctl daemon-reload", hide=True)
    return restart(conn, service)


def fingerprint(conn: Any, unit: ServiceUnit) -> dict[str, str]:
    """What must be byte-identical after tuning: the unit file, the launcher, the running
    vLLM's argv and environment (bench's DEPLOYED); and no drop-in of tune's left."""
    name = shlex.quote(f"{unit.name}.service")
    script = (
        f"sha256sum {shlex.quote(unit.unit_path)} | cut -d' ' -f1; "
        f"sha256sum {shlex.quote(unit.launcher_path)} | cut -d' ' -f1; "
        f"systemctl show -p DropInPaths --value {name}; {DEPLOYED.format(unit=name)}"
    )
    out = conn.run(script, hide=True, warn=True).stdout
    unit_sha, launcher_sha, dropins, served = [*out.split("\n", 3), "", "", ""][:4]
    return {"unit_sha256": unit_sha, "launcher_sha256": launcher_sha, "dropins": dropins,
            "served": served}  # fmt: skip
