"""`acceldeploy dashboards`: the Grafana dashboards the monitor role installs, written to a
directory without deploying anything (for a Grafana of your own, to import or provision).
With -i, vLLM's series are named as the inventory's stacks name them, as the monitor role
names them (refused when two stacks disagree)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from acceldeploy.cli.common import Parents
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.monitor import dashboards, rules, targets


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "dashboards",
        parents=[parents.optional_inventory],
        help="write the fleet's Grafana dashboards (JSON) to a directory",
        description=__doc__,
        epilog="The alerts' settings are the role's defaults; a monitor host's copy follows "
        "the inventory's monitor_* variables (a TTFT goal's panel, the KV cache's line). "
        "vLLM's series names: the stacks of -i's services, else vLLM 0.12's.",
    )
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="the directory to write them in (made if missing)")  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, str] = {}
    if args.inventory is not None:
        every = hosts_vars(args.inventory, "all")
        metrics = targets.series({host: targets.host_view(hv) for host, hv in every.items()})
    for name, text in dashboards.files(rules.settings({"metrics": metrics})).items():
        (out / name).write_text(text)
        print(out / name)
    return 0
