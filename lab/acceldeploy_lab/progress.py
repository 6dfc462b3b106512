"""One line per long step of the lab (downloads, installs, debootstrap) on stderr: when it
starts, every ``every`` seconds while it runs (with the bytes it wrote under a directory and
the rate, when it has one to watch) and when it ends, with the elapsed time. Plain lines, so
a CI log shows the same as a terminal.

    with progress.step("wheels: download the lock (4.4 GB once)", watch=wheels_dir):
        ...
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

EVERY_SECONDS = 10.0


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (0 when it does not exist)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def say(line: str) -> None:
    # $ACCELDEPLOY_PROGRESS_PREFIX tags the lines of a step that runs beside others (make test)
    print(os.environ.get("ACCELDEPLOY_PROGRESS_PREFIX", "") + line, file=sys.stderr, flush=True)


def _size(count: float) -> str:
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("KB", "MB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    return f"{count / 1000:.1f} GB"


def _line(label: str, elapsed: float, written: int | None) -> str:
    if written is None:
        return f"    {label}: {elapsed:.0f} s"
    rate = written / elapsed if elapsed > 0 else 0.0
    return f"    {label}: {_size(written)} in {elapsed:.0f} s ({_size(rate)}/s)"


@contextmanager
def step(label: str, watch: Path | None = None, every: float = EVERY_SECONDS) -> Iterator[None]:
    started = time.monotonic()
    lowest = [tree_bytes(watch) if watch else 0]
    say(f"==> {label}")
    stop = threading.Event()

    def written() -> int | None:
        # Growth since the smallest size seen: a step that first clears its directory (a
        # rebuild) counts what it writes afresh, never a negative figure.
        if not watch:
            return None
        now = tree_bytes(watch)
        lowest[0] = min(lowest[0], now)
        return now - lowest[0]

    def report() -> None:
        while not stop.wait(every):
            say(_line(label, time.monotonic() - started, written()))

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    outcome = "failed"
    try:
        yield
        outcome = "done"
    finally:
        stop.set()
        reporter.join()
        elapsed = time.monotonic() - started
        extra = f", {_size(w)} written" if (w := written()) else ""
        say(f"    {label}: {outcome} in {elapsed:.1f} s{extra}")
