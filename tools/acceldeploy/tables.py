"""Tables a person reads at a width: a terminal's, a pipe's ($COLUMNS, else 100 characters) or
a docs page's. Wider than that, a table becomes several: each repeats the key column (the
first) and takes the next columns that fit, and a long cell wraps within its column. What
`acceldeploy plan stacks` and tune print, and the stacks matrix of the docs; verify's table
stays one, at the same width and border, its long cells folded."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

PIPE_WIDTH = 100
# A column's share of the line: its cells, and a border and a space on either side.
BORDER = 3


def width() -> int | None:
    """stdout's width: None on a terminal (rich reads it), else $COLUMNS, else PIPE_WIDTH."""
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


def console() -> Any:
    """A rich Console on stdout; off a terminal, at width() and with no colour codes."""
    from rich.console import Console

    return Console(width=width())


def box(out: Any) -> Any:
    """The border of a table on the console `out`: ASCII off a terminal, so that a line is as
    many bytes as characters (awk, cut and a log's width count bytes)."""
    from rich import box as boxes

    return boxes.HEAVY_HEAD if out.is_terminal else boxes.ASCII


def _widths(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Each column's natural width: its longest line, up to a third of the line for the key
    column and a fifth for the others (a longer cell wraps)."""
    caps = [max(20, width // 3), *[max(20, width // 5)] * (len(header) - 1)]
    return [
        min(cap, max(len(line) for cell in [title, *(row[i] for row in rows)]
                     for line in cell.splitlines() or [""]))
        for i, (title, cap) in enumerate(zip(header, caps, strict=True))
    ]  # fmt: skip


def groups(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[list[int]]:
    """Each table's columns (indexes): the key column, then a run of the others. As few tables
    as the columns' natural widths fit the line in, the runs as even as they can be."""
    key, *rest = [w + BORDER for w in _widths(header, rows, width)]
    room = width - 1 - key
    count = 1
    used = 0
    for w in rest:
        if used and used + w > room:
            count, used = count + 1, 0
        used += w
    return [[0, *(i + 1 for i in run)] for run in _even(rest, count)]


def _even(widths: Sequence[int], count: int) -> list[list[int]]:
    """`count` runs of consecutive indexes of `widths` whose widest run is the narrowest."""

    @cache
    def best(start: int, parts: int) -> tuple[int, tuple[int, ...]]:
        # (the widest run's width, where each run after the first starts)
        if parts == 1:
            return sum(widths[start:]), ()
        options = []
        for cut in range(start + 1, len(widths) - parts + 2):
            rest, cuts = best(cut, parts - 1)
            options.append((max(sum(widths[start:cut]), rest), (cut, *cuts)))
        return min(options)

    bounds = [0, *best(0, min(count, len(widths)) or 1)[1], len(widths)]
    return [list(range(a, b)) for a, b in itertools.pairwise(bounds)]


def print_table(
    out: Any,
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    caption: str = "",
) -> None:
    """The rows on the console `out`, as one table or several (groups()), then the caption."""
    from rich.table import Table

    key = _widths(header, rows, out.width)[0]
    for n, columns in enumerate(groups(header, rows, out.width)):
        table = Table(title=title if n == 0 else None, box=box(out))
        for i in columns:
            table.add_column(header[i], overflow="fold", min_width=key if i == 0 else None)
        for row in rows:
            table.add_row(*(row[i] for i in columns))
        out.print(table)
    if caption:
        out.print(caption)


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> str:
    """The rows as Markdown tables of groups() at `width` characters, a blank line between."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") or " " for cell in cells) + " |"

    return "\n\n".join(
        "\n".join(
            [
                line([header[i] for i in columns]),
                "|" + "---|" * len(columns),
                *(line([row[i] for i in columns]) for row in rows),
            ]
        )
        for columns in groups(header, rows, width)
    )
