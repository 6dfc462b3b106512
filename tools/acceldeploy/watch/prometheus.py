"""The monitor's Prometheus from the controller: its HTTP API, reached through an SSH tunnel to
the monitor host (it binds the private network or loopback, never the controller's), or at a
URL given directly."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import roledefaults
from acceldeploy.monitor.promapi import Api
from acceldeploy.monitor.targets import GROUP, is_monitor
from acceldeploy.serving.service import on_host
from acceldeploy.verify.remote import forward, reach

NO_MONITOR = f"no host in the {GROUP} group: add one (docs/operations/monitoring.md)"


def pick_monitor(
    every: Mapping[str, Mapping[str, Any]], wanted: str | None
) -> tuple[str, Mapping[str, Any]]:
    """The monitor to read and its variables: --monitor's, else the monitors group's only host."""
    monitors = {host: hv for host, hv in every.items() if is_monitor(hv)}
    if not monitors:
        raise AcceldeployError(NO_MONITOR)
    known = ", ".join(sorted(monitors))
    if wanted is not None:
        if wanted not in monitors:
            raise AcceldeployError(f"--monitor {wanted}: not in the {GROUP} group ({known})")
        return wanted, monitors[wanted]
    if len(monitors) > 1:
        raise AcceldeployError(
            f"the {GROUP} group has {len(monitors)} hosts: pick one with --monitor ({known})"
        )
    ((host, hv),) = monitors.items()
    return host, hv


@contextmanager
def connect(host: str, hostvars: Mapping[str, Any], timeout: float = 10.0) -> Iterator[Api]:
    """The monitor host's Prometheus, through an SSH tunnel, for as long as the block runs."""
    conn, reached = reach(host, dict(hostvars), timeout)
    if conn is None:
        raise AcceldeployError(f"monitor {host}: {reached.detail}; {reached.fix}")
    bind = str(roledefaults.value(hostvars, "monitor_prometheus_bind"))
    port = int(roledefaults.value(hostvars, "monitor_prometheus_port"))
    try:
        with forward(conn, on_host(bind), port) as base:
            yield Api(base, timeout)
    finally:
        conn.close()
