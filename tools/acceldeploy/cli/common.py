"""What the subcommands share: the parent parsers of the options several of them take (each
option declared here once, added to a subcommand with argparse's ``parents=[...]``), the
parser class (one-line usage errors, credentials masked) and how a command names itself."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from acceldeploy.cli.argtypes import OneLineParser

# The Namespace attribute holding the program name of the (sub)command that parsed the line:
# "acceldeploy plan kv", or "plan.py kv" when a tools/*.py shim runs it. Errors start with it.
PROG = "_prog"


@dataclass(frozen=True)
class Parents:
    """One parent parser per shared option; a subcommand lists the ones it takes."""

    inventory: argparse.ArgumentParser  # -i/--inventory (required)
    optional_inventory: argparse.ArgumentParser  # -i/--inventory, not required
    limit: argparse.ArgumentParser  # --limit (an Ansible host pattern, default all)
    json: argparse.ArgumentParser  # --json (JSON on stdout instead of a table)


def _inventory(required: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "-i", "--inventory", required=required, help="an Ansible inventory (file or directory)"
    )
    return parser


def parents() -> Parents:
    limit = argparse.ArgumentParser(add_help=False)
    limit.add_argument(
        "--limit", default="all", help="an Ansible host pattern (default %(default)s)"
    )
    json = argparse.ArgumentParser(add_help=False)
    json.add_argument("--json", action="store_true", help="JSON on stdout instead of a table")
    return Parents(
        inventory=_inventory(required=True),
        optional_inventory=_inventory(required=False),
        limit=limit,
        json=json,
    )


def command(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Mark a parser that runs something: its errors are reported under its program name."""
    parser.set_defaults(**{PROG: parser.prog})
    return parser


__all__ = ["PROG", "OneLineParser", "Parents", "command", "parents"]
