"""The built docs site read as a person reads it: Markdown that reached the page as raw text is
a page the source got wrong. That is a list marker, a numbered line, a heading, a table row, a
code fence or a stray backtick inside a paragraph or list item; a fence turned into inline code
(`python` and the code run together in the text); or a fence shown inside a code block (an
indented block holding the fenced one). `python -m acceldeploy.docsgen.rendered site` after
`mkdocs build` (make lint) prints each and exits 1."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.S)
CODE = re.compile(r"<pre.*?</pre>|<div class=\"highlight\">.*?</div>", re.S)
INLINE = re.compile(r"<code>(.*?)</code>", re.S)
TAG = re.compile(r"<[^>]+>")
BLOCK = re.compile(r"<(p|li)>(.*?)</\1>", re.S)
RAW = re.compile(r"\n\s*(?:[-*]|\d+\.|#{1,6}) \S|\n\s*\|.*\||```|`")
# A fence's language, then the code on the next line: what a fence becomes as inline code (a
# code span that only wraps at a line's end starts with a word of the prose's own).
FENCE_AS_CODE = re.compile(r"^(?:python|yaml|text|bash|sh|shell|console|json|ini|toml)?\n")
FENCE = re.compile(r"^\s*(?:```|~~~)")


def _shown(text: str) -> str:
    return " ".join(text.split())[:160]


def raw_markdown(html_text: str) -> list[str]:
    """The paragraphs, list items and code blocks of one page that show raw Markdown,
    shortened."""
    found = [
        "a fence inside a code block: " + _shown(code)
        for block in PRE.findall(html_text)
        if FENCE.match(code := html.unescape(TAG.sub("", block)))
    ]
    text = CODE.sub("", html_text)
    for _, block in BLOCK.findall(text):
        if any(FENCE_AS_CODE.match(code) for code in INLINE.findall(block)):
            found.append("a fence read as inline code: " + _shown(block))
        elif RAW.search(INLINE.sub("code", block)):
            found.append(_shown(block))
    return found


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
