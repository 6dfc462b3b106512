"""Tables at a width (acceldeploy.tables): a table wider than its line is split, each part
keeping the key column; `acceldeploy plan stacks` into a pipe fits $COLUMNS, else 100
characters (and as many bytes: ASCII borders), the way `| awk '{ print length }'` counts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from acceldeploy import tables

ROOT = Path(__file__).resolve().parents[2]
HEADER = ["name", *(f"column {n}" for n in range(1, 9))]
ROWS = [[f"row-{r}", *(f"value {r}.{n} " * 3 for n in range(1, 9))] for r in range(3)]


def test_a_table_that_fits_stays_whole_and_a_wide_one_is_split_evenly() -> None:
    assert tables.groups(HEADER, ROWS, 400) == [list(range(9))]
    split = tables.groups(HEADER, ROWS, 100)
    assert len(split) > 1 and all(columns[0] == 0 for columns in split)
    assert [i for columns in split for i in columns[1:]] == list(range(1, 9))  # each once, in order
    sizes = [len(columns) - 1 for columns in split]
    assert max(sizes) - min(sizes) <= 1
    assert tables.groups(["only"], [["x"]], 100) == [[0]]


def test_printed_tables_fit_the_console_and_keep_the_key_column() -> None:
    out = Console(width=80, record=True)
    tables.print_table(out, "title", HEADER, ROWS, caption="what the figures are")
    text = out.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.count("| name ") == len(tables.groups(HEADER, ROWS, 80)) > 1
    for cell in ("row-2", "value 2.8"):
        assert cell in text
    assert text.rstrip().endswith("what the figures are")


def test_the_markdown_tables_repeat_the_key_column_and_escape_pipes() -> None:
    text = tables.markdown(["k", "a|b", "c"], [["x", "1", "2"]], 100)
    assert text == "| k | a\\|b | c |\n|---|---|---|\n| x | 1 | 2 |"
    parts = tables.markdown(HEADER, ROWS, 60).split("\n\n")
    assert len(parts) > 1 and all(part.startswith("| name |") for part in parts)


def plan_stacks(columns: str | None) -> bytes:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT / "tools")
    if columns is not None:
        env["COLUMNS"] = columns
    proc = subprocess.run(
        [sys.executable, "-m", "acceldeploy", "plan", "stacks"],
        capture_output=True, check=True, env=env, timeout=120,
    )  # fmt: skip
    return proc.stdout


@pytest.mark.parametrize(("columns", "width"), [(None, 100), ("80", 80), ("", 100)])
def test_plan_stacks_into_a_pipe_fits_the_width(columns: str | None, width: int) -> None:
    out = plan_stacks(columns)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width  # bytes, as awk counts them here
    text = out.decode()
    assert "cpu-vllm-0.12.0" in text and "Prompt bucketing" in text and "\x1b[" not in text
    assert text.count("| Stack ") > 1
