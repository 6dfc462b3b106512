"""`acceldeploy report`: what the fleet did over a window, from the monitor's Prometheus
(reached through SSH, as verify does, or at --prometheus): a PNG per figure (a line per
service, broken where it had no data), and index.html with the plots and each service's
figures and memory growth verdict. With -i, vLLM's series are named as the inventory's
stacks name them (the monitor's preflight refuses stacks that disagree, and so does this)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from acceldeploy.cli.argtypes import bounded, moment
from acceldeploy.cli.common import Parents
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import roledefaults
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.monitor import report, rules, targets
from acceldeploy.monitor.figures import FIGURES
from acceldeploy.watch import prometheus as watching


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        parents=[parents.optional_inventory],
        help="plots and an HTML page of the fleet over a window, from the monitor's Prometheus",
        description=__doc__,
        epilog="Times: now, a duration back from now (30m, 24h, 7d) or a UTC time "
        "(2026-11-26T14:00). Without --prometheus, -i names the monitors.",
    )
    parser.add_argument("--since", type=moment, default="24h", help="from (default %(default)s)")
    parser.add_argument("--until", type=moment, default="now", help="to (default %(default)s)")
    parser.add_argument("--monitor", metavar="HOST", help="the monitor, when there are several")
    parser.add_argument(
        "--prometheus", metavar="URL", help="this Prometheus, not the monitor's through SSH"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("report-results"), help="reports go here (%(default)s)"
    )
    parser.add_argument("--timeout", type=bounded(float, 0, 3600, above=True), default=30.0,
                        help="per network call, seconds")  # fmt: skip
    return parser


def growth_settings(
    hostvars: Mapping[str, Any], every: Mapping[str, Mapping[str, Any]] | None = None
) -> rules.Settings:
    """The monitor's growth alert settings (its role defaults where the inventory sets none),
    and the vLLM series names of the stacks it scrapes (of `every` host's; vLLM 0.12's
    without)."""
    views = {host: targets.host_view(hv) for host, hv in (every or {}).items()}
    return rules.settings({
        "growth_window": roledefaults.value(hostvars, "monitor_growth_window"),
        "growth_band_mib": roledefaults.value(hostvars, "monitor_growth_band_mib"),
        "metrics": targets.series(views),
    })  # fmt: skip


@contextmanager
def prometheus(args: argparse.Namespace) -> Iterator[tuple[str, rules.Settings]]:
    """The Prometheus to read (a base URL) and the growth settings to judge by: the monitor's
    when -i names it, else the defaults."""
    if args.inventory is None:
        if args.prometheus is None:
            raise AcceldeployError(
                "give -i/--inventory (its monitor, through SSH) or --prometheus URL"
            )
        if args.monitor is not None:
            raise AcceldeployError("--monitor picks a host of the inventory's monitors: give -i")
        yield args.prometheus, rules.settings({})
        return
    every = hosts_vars(args.inventory, "all")
    host, hostvars = watching.pick_monitor(every, args.monitor)
    settings = growth_settings(hostvars, every)
    if args.prometheus is not None:
        yield args.prometheus, settings
        return
    with watching.connect(host, hostvars, args.timeout) as api:
        yield api.base, settings


def collect(
    base: str, window: report.Window, settings: rules.Settings, timeout: float
) -> report.Report:
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("querying", total=len(FIGURES) + 1)

        def asking(title: str) -> None:
            progress.update(task, advance=1, description=f"querying {title}")

        return report.collect(base, window, settings, timeout, asking)


def run(args: argparse.Namespace) -> int:
    now = time.time()
    window = report.Window(args.since.resolve(now), args.until.resolve(now))
    if window.start >= window.end:
        raise AcceldeployError("--since must be before --until (give --since 24h --until now)")
    with prometheus(args) as (base, settings):
        found = collect(base, window, settings, args.timeout)
    out = args.out / time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    index = report.write(found, out)
    for (host, service), verdict in sorted(found.growth.items()):
        print(f"{host}/{service}: memory {verdict.state}: {verdict.reason}")
    print(f"report: {index}")
    return 0
