"""What the reports share, bench's (bench/report.py) and the monitor's (monitor/report.py):
matplotlib on its file-only backend, and a self-contained HTML page with the PNGs inlined."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

STYLE = (
    "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
    "td,th{border:1px solid #ccc;padding:2px 6px}table{border-collapse:collapse}"
    "img{max-width:100%}</style>"
)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def head(title: str) -> list[str]:
    """The page's first lines: its title and the reports' style."""
    return [f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>", STYLE]


def inline_png(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.name)}" src="data:image/png;base64,{data}">'


def table(header: list[str], rows: list[list[str]]) -> str:
    """An HTML table of text cells, each escaped."""
    lines = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    return "\n".join([*lines, "</table>"])
