"""Verify's monitor checks (acceldeploy.verify.monitor) against the distribution's own
Prometheus, run here on loopback: right after Prometheus starts (or reloads a changed
config), its targets are not discovered yet, then "unknown" until their first scrape; verify
waits for them instead of failing them."""

from __future__ import annotations

import time
from pathlib import Path

from promserver import needs_prometheus, prometheus

from acceldeploy.monitor.promapi import Api
from acceldeploy.verify import monitor

pytestmark = needs_prometheus
HERE = ("node", "here", None)


def test_a_target_not_scraped_yet_is_waited_for_not_failed(tmp_path: Path) -> None:
    with prometheus(tmp_path, scrape={"node": {"host": "here"}}) as base:
        active = monitor.scraped(Api(base, 5), within=30, expected={HERE})
    assert [(t["labels"]["host"], t["health"]) for t in active] == [("here", "up")], active
    (check,) = monitor.target_checks("lab3", active)
    assert (check.name, check.status) == ("scrape node here", "pass")


def test_within_bounds_the_wait(tmp_path: Path) -> None:
    with prometheus(tmp_path, scrape={"node": {"host": "here"}}) as base:
        began = time.monotonic()
        monitor.scraped(Api(base, 5), within=0, expected={HERE, ("vllm", "there", "x")})
        assert time.monotonic() - began < 5
