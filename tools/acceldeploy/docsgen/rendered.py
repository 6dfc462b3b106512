"""The built docs site read as a person reads it: Markdown that reached the page as raw text (a
list marker, a numbered line or a code fence inside a paragraph or list item) is a page the
source got wrong. `python -m acceldeploy.docsgen.rendered site` after `mkdocs build` (make
lint) prints each and exits 1."""

from __future__ import annotations

import re
import sys
from pathlib import Path

CODE = re.compile(r"<pre.*?</pre>|<div class=\"highlight\">.*?</div>", re.S)
BLOCK = re.compile(r"<(p|li)>(.*?)</\1>", re.S)
RAW = re.compile(r"\n\s*(?:[-*]|\d+\.) \S|```")


def raw_markdown(html: str) -> list[str]:
    """The paragraphs and list items of one page that hold raw Markdown, shortened."""
    text = CODE.sub("", html)
    return [" ".join(block.split())[:160] for _, block in BLOCK.findall(text) if RAW.search(block)]


def check(site: Path) -> list[str]:
    return [
        f"{page.relative_to(site)}: raw Markdown on the page: {found}"
        for page in sorted(site.rglob("*.html"))
        for found in raw_markdown(page.read_text(encoding="utf-8"))
    ]


def main(argv: list[str] | None = None) -> int:
    site = Path((argv or sys.argv[1:] or ["site"])[0])
    problems = check(site)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
