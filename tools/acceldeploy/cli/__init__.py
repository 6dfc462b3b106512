"""`acceldeploy`: the one command, its subcommands listed in COMMANDS.

Each subcommand is a module of this package, acceldeploy.cli.<name>, with

    add_parser(subparsers, parents: common.Parents) -> argparse.ArgumentParser
        adds its parser (``subparsers.add_parser("<name>", ...)``), taking the shared options
        from ``parents`` (``parents=[parents.inventory, ...]``), and returns it;
    run(args: argparse.Namespace) -> int
        runs it: the exit status; an AcceldeployError is reported by ``main``.

A new subcommand is one such module and its name added to COMMANDS. Another installed
distribution adds its own the same way: a module of its own with add_parser and run, named by
an entry point of the group ENTRY_POINTS (``acceldeploy.commands``) in its metadata; the lab's,
acceldeploy-lab (lab/pyproject.toml), adds ``lab`` so. Without it installed, ``acceldeploy lab``
is an unknown command. The modules are imported when the parser is built. tools/plan.py,
verify.py, bench.py, tune.py and lab.py call ``main`` with their subcommand and their own name
as ``prog``.

Errors, usage and otherwise, are one line on stderr, credentials masked, exit 2:
``acceldeploy <sub>: error: <message>``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from acceldeploy.cli import common
from acceldeploy.cli.argtypes import usage_error
from acceldeploy.errors import AcceldeployError
from acceldeploy.secrets import mask

# The subcommands, in the order `acceldeploy --help` lists them; then those of other installed
# distributions (ENTRY_POINTS), by name.
COMMANDS: tuple[str, ...] = (
    "init", "plan", "verify", "bench", "tune", "top", "report", "dashboards", "bundle"
)  # fmt: skip
# The entry-point group through which another distribution adds a subcommand: each entry point's
# name is the subcommand's, its value a module like acceldeploy.cli.<name> (add_parser, run).
ENTRY_POINTS = "acceldeploy.commands"

DESCRIPTION = (
    "Deploy, check and measure vLLM services on Ascend, Gaudi and CPU hosts. The playbooks "
    "(site.yml) change hosts; these commands plan, verify, bench and tune what they deploy, "
    "and report on it from the monitor's history. `acceldeploy COMMAND --help` for each."
)


class Subcommand(Protocol):
    """What a module named in COMMANDS provides."""

    def add_parser(self, subparsers: Any, parents: common.Parents) -> argparse.ArgumentParser: ...

    def run(self, args: argparse.Namespace) -> int: ...


class _Subparsers(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommand parsers, some under another program name (a tools/*.py shim's)."""

    progs: Mapping[str, str] = {}

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name in self.progs:
            kwargs.setdefault("prog", self.progs[name])
        return cast(argparse.ArgumentParser, super().add_parser(name, **kwargs))


def version_text() -> str:
    """`acceldeploy --version`: the package's version, then each pinned serving stack."""
    from acceldeploy import __version__
    from acceldeploy.planner.stacks import STACKS_FILE, load_stacks

    lines = [f"acceldeploy {__version__}"]
    try:
        stacks = load_stacks()
    except AcceldeployError as exc:
        return "\n".join([*lines, f"pinned stacks: unreadable ({exc})"])
    rows = [
        (name, "(default)" if entry["default"] else "", _serving(entry))
        for name, entry in stacks.items()
    ]
    lines.append(f"pinned stacks ({STACKS_FILE}; acceldeploy plan stacks):")
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines += [f"  {p.ljust(widths[0])}  {n.ljust(widths[1])}  {s}" for p, n, s in rows]
    return "\n".join(lines)


def _serving(entry: Mapping[str, Any]) -> str:
    parts = [f"vLLM {entry.get('vllm', '?')}"]
    labels = {
        "vllm_ascend": "vllm-ascend",
        "vllm_fork_ref": "vllm-fork",
        "vllm_gaudi_ref": "vllm-gaudi",
        "cann": "CANN",
        "software": "Gaudi software",
    }
    parts += [f"{label} {entry[key]}" for key, label in labels.items() if entry.get(key)]
    return ", ".join(parts)


class _Version(argparse.Action):
    """--version, its text made only when asked (it reads versions/stacks.yml)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        text = "print the version and the pinned serving stacks, then exit"
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help=text)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(version_text())
        parser.exit()


def installed() -> dict[str, importlib.metadata.EntryPoint]:
    """The subcommands other installed distributions add (ENTRY_POINTS), by name; one named as
    one of COMMANDS is not taken."""
    found = importlib.metadata.entry_points(group=ENTRY_POINTS)
    return {ep.name: ep for ep in sorted(found, key=lambda ep: ep.name) if ep.name not in COMMANDS}


def commands() -> tuple[str, ...]:
    """Every subcommand, in the order `acceldeploy --help` lists them."""
    return (*COMMANDS, *installed())


def subcommand(name: str) -> Subcommand:
    if name in COMMANDS:
        return cast(Subcommand, importlib.import_module(f"acceldeploy.cli.{name}"))
    return cast(Subcommand, installed()[name].load())


def build_parser(
    progs: Mapping[str, str] | None = None, only: str | None = None
) -> argparse.ArgumentParser:
    """The `acceldeploy` parser; progs renames subcommands' parsers (a shim's own name); only
    builds that one subcommand (its modules alone imported: the command line names it)."""
    top = common.OneLineParser(prog="acceldeploy", description=DESCRIPTION)
    top.add_argument("--version", action=_Version)
    sub = cast(
        _Subparsers,
        top.add_subparsers(dest="command", required=True, metavar="COMMAND", action=_Subparsers),
    )
    sub.progs = dict(progs or {})
    parents = common.parents()
    for name in commands() if only is None else (only,):
        try:
            module = subcommand(name)
        except ImportError as exc:  # another distribution's, installed half: the rest still work
            if name in COMMANDS:
                raise
            print(f"acceldeploy: warning: the installed command {name!r} does not load ({exc}): "
                  "reinstall the distribution that adds it", file=sys.stderr)  # fmt: skip
            continue
        parser = module.add_parser(sub, parents)
        parser.set_defaults(_run=module.run)
        common.command(parser)
    return top


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run `acceldeploy ARGV`. With prog (a shim's name), argv[0] is the subcommand and its
    help and errors name it prog: ``main(["bench", *sys.argv[1:]], prog="bench.py")``."""
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(words, prog)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `acceldeploy plan catalog | head`: no traceback at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _run(words: list[str], prog: str | None) -> int:
    first = words[0] if words else None
    progs = {first: prog} if prog and first else {}
    parser = build_parser(progs, first if first in commands() else None)
    args, extra = parser.parse_known_args(words)
    name = getattr(args, common.PROG, parser.prog)
    if extra:  # named by the (sub)command that left them, not by the top parser
        usage_error(name, f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args._run(args))
    except AcceldeployError as exc:
        print(f"{name}: error: {mask(str(exc))}", file=sys.stderr)
        return 2
