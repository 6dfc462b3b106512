"""`acceldeploy lab` (tools/lab.py): the local lab hosts to try everything on. Only the wiring,
a subcommand module as acceldeploy.cli takes them (add_parser, run), named by the
acceldeploy.commands entry point of lab/pyproject.toml: the lab's commands and their logic are
acceldeploy_lab.cli's, imported when the parser is built or the command runs (nothing else of
acceldeploy_lab is imported with this module)."""

from __future__ import annotations

import argparse
from typing import Any

from acceldeploy.cli.common import PROG, Parents


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    from acceldeploy_lab import cli as lab

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lab", help="local Debian lab hosts (systemd-nspawn) to try it all on; needs root"
    )
    lab.configure(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from acceldeploy_lab import cli as lab

    return lab.run(args, prog=getattr(args, PROG))
