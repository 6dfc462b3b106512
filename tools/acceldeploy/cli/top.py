"""`acceldeploy top`: a live view of every service: running and waiting requests, KV cache use,
requests and tokens per second, p99 time to first token, memory and its trend, and the
alerts about it. It reads the monitor's Prometheus (the monitors group), or each service's
/metrics directly where there is none (or with --direct). vLLM's series are named as the
inventory's stacks name them: the scraped services' stacks for Prometheus (refused, as the
monitor's preflight refuses, when two disagree), each service's own stack's when direct."""

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
from acceldeploy.monitor import rules, targets
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
            views = {h: targets.host_view(hv) for h, hv in every.items()}
            # before connecting: a refusal needs no host
            metrics = rules.settings({"metrics": targets.series(views)}).metrics
            api = stack.enter_context(prometheus.connect(host, hostvars))
            title = f"acceldeploy top: Prometheus on {host}"
            read = _from_prometheus(api, _expected(views, chosen), metrics)
        else:
            if args.monitor:
                raise AcceldeployError(f"--monitor {args.monitor}: {prometheus.NO_MONITOR}")
            title = "acceldeploy top: each service's /metrics"
            bases, names = _bases(stack, chosen)
            read = _from_metrics(bases, names)
        _show(read, title, args.every, args.once)
    return 0


def _expected(views: Mapping[str, Any], chosen: Mapping[str, Any]) -> list[top.Key]:
    """The services the inventory says are scraped, on the hosts chosen."""
    found = targets.targets(views)
    keys = [dict(t.labels) for t in found if t.job == "vllm"]
    return [(k["host"], k["service"]) for k in keys if k["host"] in chosen]


def _from_prometheus(
    api: Api, expected: list[top.Key], metrics: Mapping[str, str]
) -> Callable[[], top.Snapshot]:
    def read() -> top.Snapshot:
        return top.from_prometheus(api.query, api.alerts(), expected, time.time(), metrics)

    return read


def _bases(
    stack: contextlib.ExitStack, chosen: Mapping[str, Any]
) -> tuple[dict[top.Key, str], dict[top.Key, Mapping[str, str]]]:
    """A local URL for each service on the hosts chosen (an SSH tunnel each), and the vLLM
    series names of each (its host's stack's)."""
    bases = {}
    names: dict[top.Key, Mapping[str, str]] = {}
    for host, hv in chosen.items():
        if not groups.serves(hv) or not hv.get("acceldeploy_services"):
            continue
        plan = host_plan(hv)
        launches = plan.launches()
        if not launches:
            continue
        conn, reached = reach(host, dict(hv), 10.0)
        if conn is None:
            raise AcceldeployError(f"{host}: {reached.detail} ({reached.fix})")
        stack.callback(conn.close)
        for launch in launches:
            bases[(host, launch.name)] = stack.enter_context(tunnel(conn, launch))
            names[(host, launch.name)] = plan.platform.metrics
    if not bases:
        raise AcceldeployError("no service on the hosts chosen: check --limit and the inventory")
    return bases, names


def _from_metrics(
    bases: dict[top.Key, str], names: Mapping[top.Key, Mapping[str, str]]
) -> Callable[[], top.Snapshot]:
    previous: list[top.Snapshot] = []

    def read() -> top.Snapshot:
        texts = {key: _metrics(base) for key, base in bases.items()}
        snap = top.from_metrics(texts, previous[-1] if previous else None, time.time(), names)
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
