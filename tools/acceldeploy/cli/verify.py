"""`acceldeploy verify` (tools/verify.py): check a deployed fleet, host by host and service by
service: host state, every service's API, an opt-in memory probe."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from acceldeploy.cli.argtypes import bounded
from acceldeploy.cli.common import Parents
from acceldeploy.errors import AcceldeployError
from acceldeploy.verify import report, runner
from acceldeploy.verify.model import passed


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "verify",
        parents=[parents.inventory, parents.limit, parents.json],
        help="check a deployed fleet: host state, every service's API, a memory probe",
        description=__doc__,
        epilog="--json follows schemas/verify-report.schema.json.",
    )
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE")
    parser.add_argument(
        "--timeout",
        type=bounded(float, 0, 3600, above=True),
        default=60.0,
        help="per network call, seconds",
    )
    parser.add_argument(
        "--mm-leak-probe",
        type=bounded(int, 0, 10000),
        default=0,
        metavar="N",
        help="send N image requests and report memory before/after/reset",
    )
    parser.add_argument(
        "--mm-leak-threshold-mib", type=bounded(float, 0, above=True), default=512.0
    )
    parser.add_argument(
        "--stack",
        action="append",
        default=[],
        type=host_stack,
        metavar="HOST=STACK",
        help="check HOST against STACK, not its inventory's (what `-e acceldeploy_stack=STACK` "
        "deployed; site.yml's verify stage passes it); repeatable",
    )
    return parser


def host_stack(text: str) -> tuple[str, str]:
    host, _, stack = text.partition("=")
    if not host or not stack:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST=STACK")
    return host, stack


def run(args: argparse.Namespace) -> int:
    if args.json and args.junit:
        raise AcceldeployError("argument --junit: not allowed with argument --json")
    options = runner.Options(
        args.timeout, args.mm_leak_probe, args.mm_leak_threshold_mib, dict(args.stack)
    )
    checks = runner.run(args.inventory, args.limit, options)
    if args.json:
        print(report.dumps(report.to_json(checks, args.inventory)))
    else:
        report.print_table(checks)
    if args.junit:
        Path(args.junit).write_text(report.to_junit(checks))
    return 0 if passed(checks) else 1
