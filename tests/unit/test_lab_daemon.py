"""The lab's detached servers: a server this process started is stopped as soon as it exits
(its zombie is not taken for a server still stopping)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from acceldeploy_lab import daemon


def test_a_server_this_process_started_stops_without_waiting_out_the_timeout(
    tmp_path: Path,
) -> None:
    marker = "acceldeploy-test-daemon"
    served = daemon.Daemon("test", tmp_path / "pid", tmp_path / "log", marker)
    argv = [sys.executable, "-c", "import time; time.sleep(60)", marker]
    started = daemon.start(served, argv, ready=lambda: True, error=RuntimeError)
    assert started["started"] and daemon.running_pid(served) == started["pid"]

    begun = time.monotonic()
    assert daemon.stop(served, timeout=10)
    assert time.monotonic() - begun < 2
    assert daemon.running_pid(served) is None
    assert not Path(f"/proc/{started['pid']}").exists()  # reaped, not left a zombie
