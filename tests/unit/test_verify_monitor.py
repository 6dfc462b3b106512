"""Verify's monitor checks (acceldeploy.verify.monitor) against the distribution's own
Prometheus, run here on loopback: right after Prometheus starts (or reloads a changed
config), its targets are not discovered yet, then "unknown" until their first scrape; verify
waits for them instead of failing them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from promserver import free_port, needs_prometheus, prometheus

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


def test_a_target_found_down_before_the_check_is_scraped_again_not_failed(tmp_path: Path) -> None:
    """A deploy restarts node exporter just as Prometheus scrapes it: that scrape's "down" says
    nothing about now. Verify waits for a scrape since it began, which finds it up."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        scrape, addresses = {"node": {"host": "here"}}, {"node": address}
        with prometheus(tmp_path, scrape=scrape, interval="2s", addresses=addresses) as base:
            api = Api(base, 5)
            assert wait_for(lambda: [t["health"] for t in api.targets()] == ["down"], 30)
            listener.listen()
            serving = threading.Thread(target=answer_scrapes, args=(listener,), daemon=True)
            serving.start()
            active = monitor.scraped(api, within=30, expected={HERE})
    assert [(t["labels"]["host"], t["health"]) for t in active] == [("here", "up")], active
    assert monitor.scraped_at(active[0]) > time.time() - 30


def test_a_target_down_now_is_failed_once_scraped_since(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens
    scrape, addresses = {"node": {"host": "here"}}, {"node": address}
    with prometheus(tmp_path, scrape=scrape, interval="2s", addresses=addresses) as base:
        api = Api(base, 5)
        began = api.now()
        (target,) = monitor.scraped(api, within=30, expected={HERE})
    assert target["health"] == "down" and monitor.scraped_at(target) >= began, target
    (check,) = monitor.target_checks("lab3", [target])
    assert check.status == "fail" and "connection refused" in check.detail, check


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def answer_scrapes(listener: socket.socket) -> None:
    """A minimal exporter: answers each scrape with one gauge until the test ends."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # the test closed the listener: the scrapes are over
            return
        with conn:
            conn.recv(65536)
            body = b"# TYPE here gauge\nhere 1\n"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))  # fmt: skip
