"""verify.py: check a deployed fleet, host by host and service by service."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from acceldeploy.argtypes import OneLineParser, bounded
from acceldeploy.errors import AcceldeployError
from acceldeploy.verify import report, runner
from acceldeploy.verify.model import passed


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="verify.py", description=__doc__)
    parser.add_argument("-i", "--inventory", required=True)
    parser.add_argument("--limit", default="all", help="an Ansible host pattern")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON (schemas/verify-report.schema.json)")
    out.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = runner.Options(args.timeout, args.mm_leak_probe, args.mm_leak_threshold_mib)
    try:
        checks = runner.run(args.inventory, args.limit, options)
    except AcceldeployError as exc:
        print(f"verify.py: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(report.dumps(report.to_json(checks, args.inventory)))
    else:
        report.print_table(checks)
    if args.junit:
        Path(args.junit).write_text(report.to_junit(checks))
    return 0 if passed(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
