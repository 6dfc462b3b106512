"""`acceldeploy top`: a live view of every service: running and waiting requests, KV cache use,
requests and tokens per second, p99 time to first token, memory and its trend, and the
alerts about it. It reads the monitor's Prometheus (the monitors group), or each service's
/metrics directly where there is none (or with --direct)."""

from __future__ import annotations

import argparse
import contextlib
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from acceldeploy.cli.argtypes import bounded
from acceldeploy.cli.common import Parents
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.monitor import targets
from acceldeploy.monitor.promapi import Api
from acceldeploy.serving.hostplan import host_plan
from acceldeploy.verify.remote import reach, tunnel
from acceldeploy.watch import prometheus, top


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "top",
        parents=[parents.inventory, parents.limit],
        help="a live view of every service's figures and alerts",
        description=__doc__,
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--monitor", metavar="HOST", help="the monitor, when there are several")
    source.add_argument("--direct", action="store_true",
                        help="read each service's /metrics, not Prometheus")  # fmt: skip
    parser.add_argument("--every", type=bounded(float, 0.5, 3600), default=2.0, metavar="SECONDS",
                        help="refresh period (default %(default)s)")  # fmt: skip
    parser.add_argument("--once", action="store_true", help="print one reading and exit")
    return parser


def run(args: argparse.Namespace) -> int:
    every = hosts_vars(args.inventory, "all")
    if not every:
        raise AcceldeployError(f"inventory {args.inventory} has no hosts")
    chosen = hosts_vars(args.inventory, args.limit)
    has_monitor = any(targets.is_monitor(hv) for hv in every.values())
    with contextlib.ExitStack() as stack:
        if has_monitor and not args.direct:
            host, hostvars = prometheus.pick_monitor(every, args.monitor)
            api = stack.enter_context(prometheus.connect(host, hostvars))
            title = f"acceldeploy top: Prometheus on {host}"
            read = _from_prometheus(api, _expected(every, chosen))
        else:
            if args.monitor:
                raise AcceldeployError(f"--monitor {args.monitor}: {prometheus.NO_MONITOR}")
            title = "acceldeploy top: each service's /metrics"
            read = _from_metrics(_bases(stack, chosen))
        _show(read, title, args.every, args.once)
    return 0


def _expected(every: Mapping[str, Any], chosen: Mapping[str, Any]) -> list[top.Key]:
    """The services the inventory says are scraped, on the hosts chosen."""
    found = targets.targets({h: targets.host_view(hv) for h, hv in every.items()})
    keys = [dict(t.labels) for t in found if t.job == "vllm"]
    return [(k["host"], k["service"]) for k in keys if k["host"] in chosen]


def _from_prometheus(api: Api, expected: list[top.Key]) -> Callable[[], top.Snapshot]:
    def read() -> top.Snapshot:
        return top.from_prometheus(api.query, api.alerts(), expected, time.time())

    return read


def _bases(stack: contextlib.ExitStack, chosen: Mapping[str, Any]) -> dict[top.Key, str]:
    """A local URL for each service on the hosts chosen (an SSH tunnel each)."""
    bases = {}
    for host, hv in chosen.items():
        if not groups.serves(hv) or not hv.get("acceldeploy_services"):
            continue
        launches = host_plan(hv).launches()
        if not launches:
            continue
        conn, reached = reach(host, dict(hv), 10.0)
        if conn is None:
            raise AcceldeployError(f"{host}: {reached.detail} ({reached.fix})")
        stack.callback(conn.close)
        for launch in launches:
            bases[(host, launch.name)] = stack.enter_context(tunnel(conn, launch))
    if not bases:
        raise AcceldeployError("no service on the hosts chosen: check --limit and the inventory")
    return bases


def _from_metrics(bases: dict[top.Key, str]) -> Callable[[], top.Snapshot]:
    previous: list[top.Snapshot] = []

    def read() -> top.Snapshot:
        texts = {key: _metrics(base) for key, base in bases.items()}
        snap = top.from_metrics(texts, previous[-1] if previous else None, time.time())
        previous[:] = [snap]
        return snap

    return read


def _metrics(base: str) -> str | None:
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


def _show(read: Callable[[], top.Snapshot], title: str, every: float, once: bool) -> None:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if once:
        console.print(top.table(read(), title))
        return
    first = top.table(read(), title)
    live = Live(first, console=console, screen=False, auto_refresh=False)
    with live, contextlib.suppress(KeyboardInterrupt):
        for snap in _readings(read, every):
            live.update(top.table(snap, f"{title}  ({time.strftime('%H:%M:%S')})"), refresh=True)


def _readings(read: Callable[[], top.Snapshot], every: float) -> Iterator[top.Snapshot]:
    while True:
        time.sleep(every)
        yield read()
