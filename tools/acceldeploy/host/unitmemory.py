"""A systemd unit's memory, read on its host: the summed RSS and PSS of its processes (from
/proc/<pid>/smaps_rollup) and its cgroup's memory.current. Standard library only: bench ships it
beside its driver, and the monitor role installs it on every serving host, where it runs as

    python3 unitmemory.py --textfile DIR [--interval 15] UNIT...

writing ``acceldeploy_service_memory_bytes{service, source}`` (source pss, rss, cgroup) for node
exporter's textfile collector every interval, atomically (a temporary file renamed into place).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import time
from pathlib import Path

METRIC = "acceldeploy_service_memory_bytes"
TEXTFILE = "acceldeploy_service_memory.prom"
MIB = 1 << 20


def control_group(unit: str) -> str:
    proc = subprocess.run(["systemctl", "show", "-p", "ControlGroup", "--value", unit],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return proc.stdout.strip()


def process_tree_memory(unit: str) -> dict[str, float]:
    """The unit's processes: summed RSS and PSS (MiB), and its cgroup's memory.current."""
    group = control_group(unit)
    cgroup = Path(f"/sys/fs/cgroup{group}")
    pids: list[str] = []
    if group:
        with contextlib.suppress(OSError):
            pids = (cgroup / "cgroup.procs").read_text().split()
    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
    data = {"rss_mib": rss / 1024, "pss_mib": pss / 1024}
    with contextlib.suppress(OSError, ValueError):
        data["cgroup_mib"] = int((cgroup / "memory.current").read_text()) / MIB
    return data


def exposition(readings: dict[str, dict[str, float]]) -> str:
    """{unit: process_tree_memory(unit)} in Prometheus's text format (a running unit only)."""
    lines = [f"# HELP {METRIC} A service's memory: its processes' PSS and RSS, its cgroup's.",
             f"# TYPE {METRIC} gauge"]  # fmt: skip
    for unit, data in sorted(readings.items()):
        service = unit.removesuffix(".service")
        if not data.get("pss_mib"):
            continue  # not running: no processes to read
        for source in ("pss", "rss", "cgroup"):
            mib = data.get(f"{source}_mib")
            if mib is not None:
                value = round(mib * MIB)
                lines.append(f'{METRIC}{{service="{service}",source="{source}"}} {value}')
    return "\n".join(lines) + "\n"


def write_textfile(directory: Path, text: str) -> None:
    tmp = directory / f".{TEXTFILE}.{os.getpid()}"
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, directory / TEXTFILE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--textfile", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--once", action="store_true")
    parser.add_argument("units", nargs="+")
    args = parser.parse_args(argv)
    while True:
        started = time.monotonic()
        write_textfile(args.textfile, exposition({u: process_tree_memory(u) for u in args.units}))
        if args.once:
            return 0
        time.sleep(max(0.0, args.interval - (time.monotonic() - started)))


if __name__ == "__main__":
    raise SystemExit(main())
